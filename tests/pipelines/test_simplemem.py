"""SimpleMem control flow with ReplayLM, the union of the three views, the ablation configs,
and one end-to-end run with a real small model."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from memlab.config import build_pipeline
from memlab.memory.store import UnitMemory
from memlab.pipelines.base import RECALL_DEPTH
from memlab.pipelines.simplemem.pipeline import SimpleMem, interleave, merge_identical
from memlab.stages.answer import PromptedAnswerer, join_context, split_context
from memlab.stages.answer.simplemem import ReconstructiveAnswerer
from memlab.stages.compress import ChunkCompressor, PromptedCompressor
from memlab.stages.plan import FixedPlanner, PlanOut, PromptedPlanner
from memlab.stages.synthesize import PromptedSynthesizer
from memlab.types import Conversation, MemoryUnit, Query, Retrieved, Session, Turn
from tests.fakes import ReplayLM
from tests.memory.helpers import HashingEmbedder

REPO = Path(__file__).resolve().parents[2]
FACTS = ["adopted a cat named Mochi", "ran the city marathon", "bakes sourdough bread", "plays the cello",
         "moved to Lisbon", "works as a nurse", "visited Kyoto temples", "grows tomatoes", "reads sci-fi novels",
         "coaches a chess club"]


def _conversation() -> Conversation:
    sessions = []
    for s in (1, 2):
        when = datetime(2023, 3 + s, 10, 18, 0)
        turns = tuple(Turn(f"D{s}:{i + 1}", ("Ann", "Bob")[i % 2], f"I {FACTS[(i + s) % 10]}.", when) for i in range(10))
        sessions.append(Session(f"session_{s}", when, turns))
    return Conversation("c1", ("Ann", "Bob"), tuple(sessions))


def _script(request) -> str:
    prompt = request.messages[-1]["content"]
    if prompt.startswith("You are a memory encoder"):
        units, start = [], re.search(r"Window Start Time: (\S+)", prompt).group(1)
        for turn_id, speaker, text in re.findall(r"^\[(D\d+:\d+)\] (\w+): I (.*?)\.$", prompt, re.M):
            units.append({"content": f"{speaker} {text}.", "entities": [speaker], "topic": "life",
                          "timestamp": start, "salience": "medium", "source_turns": [turn_id]})
        return json.dumps({"memory_units": units[:4]})
    if prompt.startswith("You consolidate memory fragments"):
        fragments = re.findall(r"^- (.*)$", prompt, re.M)
        return json.dumps({"consolidated": " ".join(fragments), "abstract": "A pattern."})
    if prompt.startswith("Analyze the following user query"):
        return json.dumps({"complexity": "LOW", "retrieval_rationale": "", "lexical_keys": ["cello"],
                           "temporalConstraints": {"start": "2023-05-01", "end": "2023-05-31"},
                           "semantic_query": "Someone plays the cello."})
    if prompt.startswith("You are an assistant with access to a structured long-term memory"):
        return "FINAL ANSWER: Bob"
    raise AssertionError(f"unexpected prompt: {prompt[:80]}")


def _pipeline(lm, **overrides) -> SimpleMem:
    embedder = HashingEmbedder()
    parts = dict(
        compressor=PromptedCompressor(lm=lm), embedder=embedder,
        synthesizer=PromptedSynthesizer(lm=lm, embedder=embedder, threshold=0.5),
        planner=PromptedPlanner(lm=lm), answerer=ReconstructiveAnswerer(lm=lm), window=4, stride=3,
    )
    parts.update(overrides)
    return SimpleMem(**parts)


def _calls(lm, prefix) -> int:
    return sum(r.messages[-1]["content"].startswith(prefix) for r in lm.requests)


def test_build_compresses_every_window_and_keeps_provenance():
    lm = ReplayLM(_script)
    conversation = _conversation()
    memory = _pipeline(lm).build(conversation.history())
    assert _calls(lm, "You are a memory encoder") == 6  # 10 turns, window 4, stride 3: 3 windows per session
    turn_ids = {turn.id for _, turn in conversation.turns()}
    assert len(memory) > 0
    for unit in memory.units.values():
        assert unit.source_ids and set(unit.source_ids) <= turn_ids
    # every turn with a fact is the provenance of some entry
    assert {i for u in memory.units.values() for i in u.source_ids} == turn_ids


def test_retrieve_plans_and_returns_a_deduplicated_ranking_without_answering():
    lm = ReplayLM(_script)
    pipeline = _pipeline(lm, synthesizer=None)
    memory = pipeline.build(_conversation().history())
    before = len(lm.requests)
    ranking = pipeline.retrieve(memory, Query("q1", "Who plays the cello?"))
    assert _calls(lm, "You are an assistant") == 0 and _calls(lm, "Analyze the following") == 1
    assert len(lm.requests) == before + 1
    ids = [r.unit.id for r in ranking]
    assert len(ids) == len(set(ids)) == min(RECALL_DEPTH, len(memory))


def test_answer_gets_only_the_planned_union():
    lm = ReplayLM(_script)
    pipeline = _pipeline(lm, synthesizer=None)
    memory = pipeline.build(_conversation().history())
    answer = pipeline.answer(memory, Query("q1", "Who plays the cello?"))
    assert answer.text == "Bob" and answer.error is None
    planned = pipeline.planned_retrieval(memory, Query("q1", "Who plays the cello?"))
    assert planned.plan.depth == 3  # LOW
    assert all(len(hits) <= 3 for hits in planned.views.values())
    assert len(answer.context.splitlines()) == len(planned.union) <= 9
    assert [r.unit.id for r in answer.retrieved[: len(planned.union)]] == [r.unit.id for r in planned.union]
    # the symbolic view keeps only units in May 2023 naming "cello" (none is an entity: time alone)
    assert planned.views["symbolic"] and all(r.unit.timestamp.month == 5 for r in planned.views["symbolic"])
    assert any("cello" in r.unit.text for r in planned.views["lexical"])
    steps = [s["step"] for s in answer.trace.steps]
    assert steps == ["plan", "retrieve", "answer"]


def test_abstracts_reach_the_answer_prompt_in_their_own_block():
    lm = ReplayLM(_script)
    pipeline = _pipeline(lm)
    pipeline.synthesizer.threshold = 0.15  # the hashing embedder: units sharing a speaker name cluster
    memory = pipeline.build(_conversation().history())
    assert _calls(lm, "You consolidate memory fragments") >= 1
    abstracts = [u for u in memory.units.values() if u.kind == "abstract"]
    assert abstracts and all(u.attributes["summarises"] for u in abstracts)
    query = Query("q", "A pattern?")
    pipeline.planner = FixedPlanner(depth=20)
    pipeline.answer(memory, query)
    prompt = lm.requests[-1].messages[-1]["content"]
    block = prompt.split("[ABSTRACT REPRESENTATIONS]:")[1].split("[DETAILED MEMORY UNITS]:")[0]
    assert "A pattern." in block


def _r(uid: str) -> Retrieved:
    return Retrieved(MemoryUnit(uid, uid, (uid,)), 1.0)


def test_union_of_the_three_views_is_deduplicated_and_interleaved():
    semantic, lexical, symbolic = [_r("a"), _r("b"), _r("c")], [_r("b"), _r("d")], [_r("a"), _r("e"), _r("d")]
    union = interleave([semantic, lexical, symbolic])
    assert [r.unit.id for r in union] == ["a", "b", "d", "e", "c"]
    assert [r.score for r in union] == sorted((r.score for r in union), reverse=True)
    assert interleave([[], [], []]) == []


def test_merge_identical_keeps_the_union_of_provenance():
    units = [MemoryUnit("x", "Ann ran.", ("D1:1",), attributes={"entities": ["Ann"]}),
             MemoryUnit("y", "ann  ran.", ("D1:2", "D1:1"), attributes={"entities": ["Ann", "race"]}),
             MemoryUnit("z", "Bob sang.", ("D1:3",))]
    merged = merge_identical(units)
    assert [(u.id, u.source_ids) for u in merged] == [("x", ("D1:1", "D1:2")), ("z", ("D1:3",))]
    assert merged[0].attributes["entities"] == ["Ann", "race"]


def test_symbolic_filters_relax_entities_before_time():
    plan = PlanOut("q", ("Ann",), 3, start=datetime(2023, 1, 1), end=datetime(2023, 2, 1))
    filters = SimpleMem.symbolic_filters(plan)
    assert [f.entities for f in filters] == [frozenset({"ann"}), None]
    assert SimpleMem.symbolic_filters(PlanOut("q", (), 3)) == []


def test_context_blocks_round_trip_and_answer_parsing():
    context = join_context(["A pattern."], ["[1 May 2023] Bob\nplays cello.", "x"])
    assert split_context(context) == (["A pattern."], ["[1 May 2023] Bob plays cello.", "x"])
    stage = ReconstructiveAnswerer(lm=ReplayLM(["  ", "FINAL ANSWER: "]))
    from memlab.stages.answer import AnswerIn

    request = stage.render(AnswerIn("Who?", context, datetime(2023, 6, 1)))
    prompt = request.messages[-1]["content"]
    assert "USER QUERY: Who?" in prompt and "- A pattern." in prompt and "(The question is asked on 1 June 2023.)" in prompt
    out = stage.run_one(AnswerIn("Who?", ""))
    assert out.text == "" and out.error and len(stage.failures) == 1
    assert "[ABSTRACT REPRESENTATIONS]: (none)" in stage.render(AnswerIn("Who?", "")).messages[-1]["content"]


def test_answer_suffix_is_memlab_text_inserted_before_the_cue_and_can_be_turned_off():
    from memlab.prompts import load_prompt
    from memlab.stages.answer import AnswerIn

    item = AnswerIn("Who plays the cello?", join_context([], ["Bob plays the cello."]))
    faithful = ReconstructiveAnswerer(lm=ReplayLM([]), answer_suffix=False).render(item).messages[-1]["content"]
    grounded = ReconstructiveAnswerer(lm=ReplayLM([])).render(item).messages[-1]["content"]
    a3 = load_prompt("simplemem/answer")
    suffix = load_prompt("simplemem/answer_suffix")
    assert a3.status == "published" and suffix.status == "written" and "memlab" in suffix.source
    assert "abstain only when no retrieved entry" in grounded.lower() and "Abstain" not in faithful
    # Every A.3 line is kept, in order; the suffix sits between instruction 4 and the cue.
    a3_lines = faithful.splitlines()
    assert grounded.splitlines() == a3_lines[:-1] + suffix.body.splitlines() + a3_lines[-1:]
    assert grounded.rstrip().endswith("FINAL ANSWER:")


def test_empty_memory_answers_from_nothing():
    lm = ReplayLM(_script)
    pipeline = _pipeline(lm)
    memory = UnitMemory(HashingEmbedder())
    answer = pipeline.answer(memory, Query("q", "Who?"))
    assert answer.retrieved == [] and answer.context == ""


@pytest.mark.parametrize(
    "name,compressor,synthesizer,planner,answerer",
    [
        ("pipelines/simplemem.yaml", PromptedCompressor, PromptedSynthesizer, PromptedPlanner, ReconstructiveAnswerer),
        ("ablations/simplemem_no_compression.yaml", ChunkCompressor, PromptedSynthesizer, PromptedPlanner, ReconstructiveAnswerer),
        ("ablations/simplemem_no_synthesis.yaml", PromptedCompressor, type(None), PromptedPlanner, ReconstructiveAnswerer),
        ("ablations/simplemem_no_planning.yaml", PromptedCompressor, PromptedSynthesizer, FixedPlanner, ReconstructiveAnswerer),
        ("ablations/simplemem_short_answer_prompt.yaml", PromptedCompressor, PromptedSynthesizer, PromptedPlanner, PromptedAnswerer),
    ],
)
def test_configs_build_the_ablations(name, compressor, synthesizer, planner, answerer):
    pipeline, _, _ = build_pipeline(REPO / "configs" / name)
    assert isinstance(pipeline.compressor, compressor)
    assert isinstance(pipeline.synthesizer, synthesizer)
    assert isinstance(pipeline.planner, planner)
    assert type(pipeline.answerer) is answerer
    assert len(pipeline.lms()) == 1  # one LM shared by every stage
    if synthesizer is PromptedSynthesizer:
        assert pipeline.synthesizer.embedder is pipeline.embedder
    if name.endswith("no_compression.yaml"):
        assert pipeline.stride == pipeline.window


@pytest.mark.slow
def test_end_to_end_with_a_real_small_model(llama_cpp_works, tmp_path):
    from memlab.data import load_sample
    from memlab.embed import SentenceTransformerEmbedder
    from memlab.lm.llamacpp import LlamaCppLM
    from memlab.stages.temporal import RuleTemporalNormalizer

    conversation = load_sample()[0]
    conversation = Conversation(conversation.id, conversation.speakers, conversation.sessions[:2], conversation.questions)
    lm = LlamaCppLM(model="smollm2-135m-instruct-q4_1", n_ctx=2048, cache=None)
    embedder = SentenceTransformerEmbedder()
    pipeline = SimpleMem(
        compressor=PromptedCompressor(lm=lm, normalizer=RuleTemporalNormalizer(), max_units=2, max_tokens=128),
        embedder=embedder,
        synthesizer=PromptedSynthesizer(lm=lm, embedder=embedder, max_tokens=64),
        planner=PromptedPlanner(lm=lm, max_tokens=96),
        answerer=ReconstructiveAnswerer(lm=lm, max_tokens=16),
        window=16, stride=16,  # one window per session: few calls
    )
    memory = pipeline.build(conversation.history())
    turn_ids = {t.id for _, t in conversation.turns()}
    for unit in memory.units.values():
        assert unit.source_ids and set(unit.source_ids) <= turn_ids
    for question in conversation.questions[:2]:
        answer = pipeline.answer(memory, question.as_query())
        assert isinstance(answer.text, str)
        assert len(answer.retrieved) == min(RECALL_DEPTH, len(memory))
    assert lm.usage.snapshot()["llm_calls"] >= 2 + 2 * 2  # 2 windows, then plan + answer per question
    assert all(f.stage for f in pipeline.llm_usage().failures)
