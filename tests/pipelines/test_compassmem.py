"""CompassMem's control flow with a scripted LM: construction (events, relations, fusion,
topics) and search (plan, localise, explore on the shared queue, refine, respond)."""

from __future__ import annotations

import json
import re
from datetime import datetime

import numpy as np
import pytest

from memlab.embed import SentenceTransformerEmbedder
from memlab.pipelines.compassmem.pipeline import CompassMem
from memlab.pipelines.compassmem.search import Search, priority
from memlab.pipelines.compassmem.settings import ConstructionSettings, SearchSettings
from memlab.pipelines.compassmem.topics import TopicLayer, n_clusters
from memlab.stages.answer import PromptedAnswerer
from memlab.stages.fuse import EventFuser, FuseIn, FuseOut, PromptedEventFuser
from memlab.stages.navigate import PromptedNavigator
from memlab.stages.refine import PromptedQueryRefiner
from memlab.stages.relate import PromptedRelationExtractor
from memlab.stages.segment import PromptedEventSegmenter
from memlab.stages.select import PromptedNodeSelector
from memlab.stages.subgoal import PromptedSubgoalPlanner
from memlab.types import History, Query, Session, Turn
from tests.fakes import ReplayLM

TOPICS = [
    ("I adopted a puppy named Rex from the shelter.", "Rex chews every shoe in the house."),
    ("I started a pottery class on Tuesdays.", "My first pottery bowl cracked in the kiln."),
    ("I adopted a puppy named Rex from the shelter.", "We are planning a trip to Lisbon in June."),
]


def history() -> History:
    sessions = []
    for k, texts in enumerate(TOPICS, start=1):
        turns = tuple(Turn(f"D{k}:{t}", speaker, text) for t, (speaker, text) in enumerate(
            [("Ann", texts[0]), ("Bob", "That is great news!"), ("Ann", texts[1]), ("Bob", "Tell me more.")], start=1))
        sessions.append(Session(f"session_{k}", datetime(2023, 5, k * 7), turns))
    return History("c0123", ("Ann", "Bob"), tuple(sessions))


class Script:
    """Replies by prompt: what each CompassMem stage would be told by a cooperative model."""

    def __init__(self, same_event: bool = True, action: str = "EXPAND", satisfy: str = "[1, 2]",
                 overlap_words: tuple[str, ...] = ("Rex",)) -> None:
        self.same_event, self.action, self.satisfy = same_event, action, satisfy
        self.overlap_words = overlap_words
        self.kinds: list[str] = []

    def __call__(self, request) -> str:
        prompt = request.messages[0]["content"]
        if "extract meaningful events" in prompt:
            ids = re.findall(r"\[(D\d+:\d+)\]", prompt)
            lines = re.findall(r"\[D\d+:\d+\] \w+: (.*)", prompt)
            return self.reply("event", {"events": [
                {"turns": ids[:2], "summary": lines[0], "people": ["Ann", "Bob"]},
                {"turns": ids[2:], "summary": lines[2], "people": ["Ann"]}]})
        if "pairwise relations" in prompt:
            return self.reply("relate", {"relations": [{"source": "E1", "target": "E2", "type": "cause-effect",
                                                        "evidence": re.findall(r"\[(D\d+:\d+)\]", prompt)[:1]}]})
        if "SAME event" in prompt:  # same text: the same event; a shared overlap word: overlap
            existing, new = (re.search(rf"EVENT {x}[^:]*: \S+ \[[^]]*\] (?:\([^)]*\) )?(.*)", prompt).group(1) for x in "AB")
            same = self.same_event and existing == new
            overlap = same or any(w in existing and w in new for w in self.overlap_words)
            return self.reply("fuse", {"same_event": same, "has_overlap": overlap,
                                       "relation_type": "follow up" if overlap else None, "reasoning": "compared"})
        if "sub-goals that need to be satisfied" in prompt:
            return self.reply("plan", "Sub-goal 1: the dog's name\nSub-goal 2: what the dog does")
        if "Generate a NEW search query" in prompt:
            return self.reply("refine", "New Query: dog behaviour at home\nTarget Sub-goals: [2]")
        if "possible actions" in prompt:
            neighbours = prompt.split("NEIGHBOR NODES")[-1]
            keys = re.findall(r"\bN\d+\b", neighbours)[:1]
            return self.reply("navigate", f"ACTION: {self.action}\nNEXT_NODES: [{', '.join(keys) or 'NONE'}]\n"
                                          f"SATISFIED_SUBGOALS: {self.satisfy}\n")
        if "Selected Nodes" in prompt:
            keys = re.findall(r"\bN\d+\b", prompt.split("QUESTION")[-1])[:1]
            return self.reply("select", f"Selected Nodes: [{', '.join(keys)}]\n")
        return self.reply("answer", "Rex")

    def reply(self, kind: str, value) -> str:
        self.kinds.append(kind)
        return value if isinstance(value, str) else json.dumps(value)


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder()
    embedder.warm_up()
    return embedder


def pipeline(script: Script, embedder, **settings) -> CompassMem:
    lm = ReplayLM(script)
    defaults = dict(
        embedder=embedder, segmenter=PromptedEventSegmenter(lm=lm), navigator=PromptedNavigator(lm=lm),
        answerer=PromptedAnswerer(lm=lm), relation_extractor=PromptedRelationExtractor(lm=lm),
        fuser=PromptedEventFuser(lm=lm), planner=PromptedSubgoalPlanner(lm=lm), refiner=PromptedQueryRefiner(lm=lm),
        selector=PromptedNodeSelector(lm=lm),
        cluster_selector=PromptedNodeSelector(lm=lm, prompt="compassmem/select_cluster_nodes"))
    return CompassMem(**{**defaults, **settings})


def test_build_makes_events_relations_fusion_and_topics(minilm):
    script = Script(same_event=True)
    memory = pipeline(script, minilm).build(history())
    # 3 sessions x 2 events; session 3's first event repeats session 1's: merged into it
    assert len(memory.events()) == 5 and memory.merges == 1
    merged = memory.unit("c0123/session_1/w0/event0")
    assert merged.source_ids == ("D1:1", "D1:2", "D3:1", "D3:2")
    labels = {data["label"] for _, _, data in memory.graph.edges("relation")}
    assert labels == {"causal"}  # "cause-effect" normalised
    # the merged event's relation attaches to the node it merged into
    assert any(src == "c0123/session_1/w0/event0" and dst == "c0123/session_3/w0/event1"
               for src, dst, _ in memory.graph.edges("relation"))
    assert set(memory.topics.topic_of) == set(memory.events())
    assert script.kinds.count("fuse") == 4  # every new event of sessions 2 and 3 is compared with its e*


def test_overlap_links_instead_of_merging(minilm):
    memory = pipeline(Script(same_event=False), minilm).build(history())
    assert len(memory.events()) == 6 and memory.merges == 0
    edges = {(s, d, data["label"]) for s, d, data in memory.graph.edges("relation")}
    assert ("c0123/session_1/w0/event0", "c0123/session_3/w0/event0", "follow_up") in edges


def crossing(memory) -> set[tuple[str, str, str]]:
    return {(s.split("/")[1], d.split("/")[1], data["label"]) for s, d, data in memory.graph.edges("relation")
            if s.split("/")[1] != d.split("/")[1]}


def test_fusion_is_three_way_for_every_new_event(minilm):
    """Merge above the merge threshold; an overlap links at any similarity; neither: a new node."""
    # "Rex chews every shoe" (session 1) and session 3's Rex event overlap at a cosine far
    # below 0.9: the paper's edge case, which a fuser asked only above 0.9 never saw
    memory = pipeline(Script(same_event=False), minilm).build(history())
    assert crossing(memory) == {("session_1", "session_3", "follow_up")}
    assert memory.structure()["cross_session_edges"] == 1
    # nothing overlaps: every event is a node of its own and no edge crosses sessions
    alone = pipeline(Script(same_event=False, overlap_words=()), minilm).build(history())
    assert len(alone.events()) == 6 and not crossing(alone)


class SameEventFuser(EventFuser):
    """A fuser that calls every pair the same event."""

    def forward(self, batch: list[FuseIn]) -> list[FuseOut]:
        return [FuseOut(same_event=True) for _ in batch]


def test_a_same_event_reply_below_the_merge_threshold_is_an_overlap(minilm):
    memory = pipeline(Script(), minilm, fuser=SameEventFuser()).build(history())
    # only session 3's restatement of session 1's adoption (cosine 1) merges; the other three
    # new events are linked to their e* by a "related" edge
    assert memory.merges == 1 and len(memory.events()) == 5
    assert [data["label"] for *_, data in memory.graph.edges("relation")].count("related") == 3


def test_fusion_neighbours_compare_each_event_with_several_earlier_ones(minilm):
    one, three = Script(same_event=False), Script(same_event=False)
    pipeline(one, minilm).build(history())
    memory = pipeline(three, minilm, construction=ConstructionSettings(fusion_neighbours=3)).build(history())
    # session 2 sees 2 earlier events, session 3 sees 4: (2 + 2) pairs against (2 + 2) * 1
    assert one.kinds.count("fuse") == 4 and three.kinds.count("fuse") == 2 * 2 + 2 * 3
    assert memory.merges == 0 and ("session_1", "session_3", "follow_up") in crossing(memory)


def test_no_edges_ablation_calls_no_relation_extractor(minilm):
    script = Script(same_event=False)
    memory = pipeline(script, minilm, construction=ConstructionSettings(edges=False),
                      relation_extractor=None).build(history())
    assert memory.graph.num_edges("relation") == 0 and "relate" not in script.kinds


def test_search_keeps_evidence_ranks_it_first_and_answers_from_it(minilm):
    script = Script(action="EXPAND", satisfy="[1, 2]")
    cm = pipeline(script, minilm)
    memory = cm.build(history())
    answer = cm.answer(memory, Query("q1", "What is the name of the dog Ann adopted?", datetime(2023, 6, 1)))
    stats = next(s for s in answer.trace.steps if s["step"] == "search")
    assert stats["subgoals"] == 2 and stats["fully_satisfied"] and stats["refinements"] == 0
    kept = [memory.id_of[k] for k in next(s for s in answer.trace.steps if s["step"] == "answer")["evidence"]]
    assert kept and [r.unit.id for r in answer.retrieved[: len(kept)]] == kept
    assert "[7 May 2023]" in answer.context and "Rex" in answer.context and answer.text == "Rex"
    assert len({r.unit.id for r in answer.retrieved}) == len(answer.retrieved) == len(memory.events())


def test_unsatisfied_subgoals_refine_once_then_answer(minilm):
    script = Script(action="EXPAND", satisfy="[]")
    cm = pipeline(script, minilm)
    answer = cm.answer(cm.build(history()), Query("q1", "What does Rex do at home?"))
    assert script.kinds.count("refine") == 1 and script.kinds.count("plan") == 1
    stats = next(s for s in answer.trace.steps if s["step"] == "search")
    assert stats["refinements"] == 1 and not stats["fully_satisfied"]


def test_no_kept_evidence_falls_back_to_the_initial_top_k(minilm):
    script = Script(action="SKIP", satisfy="[]")
    cm = pipeline(script, minilm, search=SearchSettings(refinement_rounds=0), refiner=None)
    answer = cm.answer(cm.build(history()), Query("q1", "What does Rex do at home?"))
    evidence = next(s for s in answer.trace.steps if s["step"] == "answer")["evidence"]
    assert len(evidence) == cm.search_settings.top_k and answer.context.count("\n") == cm.search_settings.top_k - 1


def test_explorer_budget_bounds_the_steps(minilm):
    script = Script(action="EXPAND", satisfy="[]")
    cm = pipeline(script, minilm, search=SearchSettings(explorers=1, max_steps=2, refinement_rounds=0), refiner=None)
    answer = cm.answer(cm.build(history()), Query("q1", "What does Rex do at home?"))
    stats = next(s for s in answer.trace.steps if s["step"] == "search")
    assert stats["steps"] <= 2 and script.kinds.count("navigate") == stats["steps"]


def test_queue_priority_is_the_best_unsatisfied_subgoal():
    goals = np.eye(3, dtype=np.float32)
    search = Search(Query("q", "q"), ("a", "b", "c"), [True, False, False], goals)
    nodes = np.array([[1.0, 0, 0], [0, 0.6, 0.8], [0, 0.9, 0.1]], dtype=np.float32)
    # subgoal a is satisfied: node 0's similarity to it no longer counts
    assert priority(search, nodes).tolist() == pytest.approx([0.0, 0.8, 0.9])
    search.satisfied = [True, True, True]  # all satisfied: every subgoal counts again
    assert priority(search, nodes).tolist() == pytest.approx([1.0, 0.8, 0.9])


def test_topic_layer_initialises_assigns_and_reclusters_on_a_toy_stream():
    assert [n_clusters(n) for n in (1, 3, 9, 10, 60, 400)] == [1, 2, 2, 2, 12, 50]
    rng = np.random.default_rng(0)
    centres = np.eye(4, dtype=np.float32)
    stream = [c + 0.01 * rng.normal(size=4) for c in centres for _ in range(3)]
    vectors = np.array([v / np.linalg.norm(v) for v in stream], dtype=np.float32)
    ids = [f"e{i}" for i in range(len(vectors))]
    layer = TopicLayer(threshold=0.9, recluster_every=2)
    layer.step(ids[:3], vectors[:3], ids[:3], vectors[:3])  # step 1: k-means over the first events
    assert layer.n_topics == 2
    layer.step(ids[3:6], vectors[3:6], ids[:6], vectors[:6])  # step 2 = T: re-clustered
    assert layer.reclusterings == 1
    layer.step(ids[6:9], vectors[6:9], ids[:9], vectors[:9])  # step 3: online, a new direction
    assert len({layer.topic_of[i] for i in ids[6:9]}) == 1  # one new topic for the three
    assert layer.topic_of["e6"] not in {layer.topic_of[i] for i in ids[:6]}


def test_build_takes_a_history_only(minilm):
    from memlab.types import Conversation

    h = history()
    with pytest.raises(TypeError, match="History"):
        pipeline(Script(), minilm).build(Conversation(h.id, h.speakers, h.sessions))


ABLATIONS = sorted((REPO := __import__("pathlib").Path(__file__).resolve().parents[2] / "configs").glob(
    "ablations/compassmem_*.yaml"))


def _with_lm(pipeline, lm):
    from memlab.lm.base import LM

    for module in pipeline.modules():
        for key, value in list(vars(module).items()):
            if isinstance(value, LM):
                setattr(module, key, lm)
    return pipeline


@pytest.mark.parametrize("config", [REPO / "pipelines" / "compassmem.yaml", *ABLATIONS], ids=lambda p: p.stem)
def test_config_and_each_ablation_run_on_the_sample(config, minilm, monkeypatch):
    from memlab.config import build_pipeline
    from memlab.data import load_sample

    assert len(ABLATIONS) == 6  # the five of Figure 4 and the EmbeddingGemma swap
    script = Script(action="EXPAND", satisfy="[1]")
    cm = _with_lm(build_pipeline(config)[0], ReplayLM(script))
    if "embedder" in cm._modules:  # compassmem_gemma's CachedEmbedder is a child module: unregister it first
        del cm.embedder
    cm.embedder = minilm
    sample = load_sample()[0]
    memory = cm.build(sample.history())
    turn_ids = {t.id for _, t in sample.turns()}
    assert memory.events() and all(set(memory.unit(e).source_ids) <= turn_ids for e in memory.events())
    answers = cm.answer_many(memory, [q.as_query() for q in sample.questions[:2]])
    assert all(a.retrieved and isinstance(a.text, str) for a in answers)
    table4 = cm.search_statistics([a.trace.steps for a in answers])  # appendix Table 4, for metrics.json
    assert table4["questions"] == 2 and table4["mean_steps"] >= 0 and 0 <= table4["refined_share"] <= 1
    assert set(table4) >= {"mean_kept", "mean_initial_nodes", "fully_satisfied_share", "actions"}
    name = config.stem
    assert ("plan" in script.kinds) == (name != "compassmem_no_subgoals")
    assert ("relate" in script.kinds) == (name not in ("compassmem_no_relations",))
    if name == "compassmem_no_topics":
        assert memory.topics is None
    if name == "compassmem_chunks":
        assert "event" not in script.kinds


@pytest.mark.slow
def test_compassmem_with_a_real_small_model(tmp_path):
    pytest.importorskip("llama_cpp")
    from dataclasses import replace

    from memlab.config import build_pipeline
    from memlab.data import load_sample
    from memlab.lm.errors import LMUnavailableError
    from memlab.lm.models import resolve_model
    from memlab.types import Conversation

    try:
        resolve_model("smollm2-135m-instruct-q4_1")
    except LMUnavailableError as exc:
        pytest.skip(str(exc))
    cache = tmp_path / "cache.sqlite"
    overrides = [f"{side}.lm.{key}={value}" for side in ("segmenter", "answerer")
                 for key, value in (("model", "smollm2-135m-instruct-q4_1"), ("n_ctx", 2048), ("cache", cache))]
    overrides += ["segmenter.max_tokens=160", "relation_extractor.max_tokens=96", "search.max_steps=2", "search.explorers=2",
                  "planner.max_tokens=48", "answerer.max_tokens=24"]
    pipeline, _, _ = build_pipeline(REPO / "pipelines" / "compassmem.yaml", overrides)
    sample = load_sample()[0]
    sessions = tuple(replace(s, turns=s.turns[:4]) for s in sample.sessions[:2])
    small = Conversation(sample.id, sample.speakers, sessions, sample.questions[:1])
    memory = pipeline.build(small.history())
    turn_ids = {t.id for _, t in small.turns()}
    covered = {t for e in memory.events() for t in memory.unit(e).source_ids}
    assert covered == turn_ids  # every turn is in some event (extracted, or extractive when the model fails)
    answer = pipeline.answer(memory, small.questions[0].as_query())
    assert isinstance(answer.text, str) and answer.retrieved
    assert len(pipeline.lms()) == 2 and all(lm.usage.snapshot()["llm_calls"] > 0 for lm in pipeline.lms())
    print("compassmem smollm2:", memory.stats(), [lm.usage.snapshot() for lm in pipeline.lms()],
          len(pipeline.llm_usage().failures), "failures")


def test_search_statistics_aggregate_like_table_4(minilm):
    from memlab.pipelines.compassmem.search import run_search_statistics, search_statistics_table

    cm = pipeline(Script(action="EXPAND", satisfy="[1]"), minilm)
    memory = cm.build(history())
    answers = cm.answer_many(memory, [Query("q1", "What is the dog called?"), Query("q2", "Where is the trip?")])
    rows = [{"latency_s": 1.0 + i, "trace": a.trace.steps} for i, a in enumerate(answers)]
    result = run_search_statistics(rows)
    assert result["questions"] == 2 and result["time_mean_s"] == 1.5 and result["subgoals_mean"] == 2
    assert result["refined_share"] == 1.0  # only subgoal 1 is ever satisfied: one refinement each
    assert result["actions"]["EXPAND"] == sum(s["steps"] for s in
                                              (next(x for x in a.trace.steps if x["step"] == "search") for a in answers))
    assert search_statistics_table([("run", result)]).splitlines()[2].startswith("| run | 2 | 2.00 |")
    with pytest.raises(ValueError, match="no question of this run has a CompassMem search step"):
        run_search_statistics([{"trace": []}])


def test_table4_statistics_average_the_per_question_search():
    from memlab.pipelines.compassmem.search import table4_statistics

    stats = [{"steps": 6, "refinements": 1, "kept": 3, "initial_nodes": 5, "satisfaction": 1.0, "fully_satisfied": True,
              "actions": {"EXPAND": 2, "SKIP": 4}},
             {"steps": 9, "refinements": 0, "kept": 2, "initial_nodes": 4, "satisfaction": 0.5, "fully_satisfied": False,
              "actions": {"SKIP": 9}}]
    assert table4_statistics(stats) == {
        "questions": 2, "mean_steps": 7.5, "refined_share": 0.5, "mean_kept": 2.5, "mean_initial_nodes": 4.5,
        "mean_satisfaction": 0.75, "fully_satisfied_share": 0.5, "actions": {"EXPAND": 2, "SKIP": 13}}
    assert table4_statistics([]) == {}
