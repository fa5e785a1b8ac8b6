"""MAGMA control flow with a scripted LM, and one real-model run."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from memlab.config import build_pipeline
from memlab.lm.types import ChatRequest
from memlab.pipelines.base import RECALL_DEPTH
from memlab.pipelines.magma.pipeline import MAGMA
from memlab.stages.answer.adaptive import AdaptiveAnswerer
from memlab.stages.consolidate import PromptedCausalConsolidator, PromptedCausalVerdicts
from memlab.stages.event import PromptedEventExtractor
from memlab.stages.route import RuleRouter
from memlab.stages.segment import TurnSegmenter
from memlab.stages.traverse import TraversalPolicy
from memlab.types import Conversation, Query, Question, Session, Turn
from tests.fakes import CallbackEventExtractor, ReplayLM
from tests.memory.helpers import HashingEmbedder

REPO = Path(__file__).resolve().parents[2]

TURNS = [
    ("Ann", "My car broke down on the highway."),
    ("Bob", "Oh no, what happened after that?"),
    ("Ann", "I missed my job interview in Boston because of it."),
    ("Bob", "I started pottery classes with Maria."),
    ("Ann", "Rex, my puppy, loves the beach."),
    ("Bob", "Maria says my bowls are getting better."),
]


def conversation() -> Conversation:
    sessions = []
    for s in (1, 2):
        turns = tuple(Turn(f"D{s}:{i + 1}", who, text) for i, (who, text) in enumerate(TURNS))
        sessions.append(Session(f"session_{s}", datetime(2023, 5, s * 7, 12), turns))
    return Conversation("c1", ("Ann", "Bob"), tuple(sessions))


C = conversation().history().id  # event ids are "<history id>/<turn id>"


def scripted(request: ChatRequest) -> str:
    prompt = request.messages[-1]["content"]
    if "Graph Memory Parser" in prompt:
        text = re.search(r"- Text: (.*)", prompt).group(1)
        names = [w.strip(".,!?") for w in text.split() if w[:1].isupper() and w.strip(".,!?") not in ("My", "I", "Oh")]
        return json.dumps({"entities": names + ["Zorro"], "topic": "life", "relationships": [],
                           "semantic_facts": [text], "dates_mentioned": [], "summary": text})
    if "Event [0] was just added" in prompt:
        events = dict(re.findall(r"^\[(\d+)\] (?:\([^)]*\) )?(.*)$", prompt, flags=re.M))
        if "missed my job interview" in events["0"]:
            cause = next(int(i) for i, t in events.items() if "broke down" in t)
            return json.dumps({"links": [{"cause": cause, "effect": 0, "score": 0.9}]})
        return json.dumps({"links": []})
    if "precision QA assistant" in prompt:
        return "Her car broke down."
    raise AssertionError(f"unexpected prompt: {prompt[:80]}")


def make(lm, **kwargs) -> MAGMA:
    return MAGMA(
        segmenter=TurnSegmenter(), embedder=HashingEmbedder(), router=RuleRouter(),
        traverser=TraversalPolicy(drop_threshold=0.0), answerer=AdaptiveAnswerer(lm),
        event_extractor=PromptedEventExtractor(lm), consolidator=PromptedCausalConsolidator(lm), **kwargs,
    )


def test_build_makes_the_four_edge_spaces_with_provenance():
    lm = ReplayLM(scripted)
    memory = make(lm).build(conversation().history())
    graph = memory.graph
    events = graph.nodes("event")
    assert len(events) == 12 and all(len(graph.provenance(e)) == 1 for e in events)
    assert graph.provenance(f"{C}/D1:3") == ("D1:3",)
    temporal = graph.edges("temporal")
    assert len(temporal) == 11 and all(d["directed"] for _, _, d in temporal)
    assert (f"{C}/D1:6", f"{C}/D2:1") in {(u, v) for u, v, _ in temporal}
    causal = {(u, v) for u, v, _ in graph.edges("causal")}
    assert (f"{C}/D1:1", f"{C}/D1:3") in causal and (f"{C}/D2:1", f"{C}/D2:3") in causal
    entities = graph.nodes("entity")
    assert "entity:maria" in entities and "entity:boston" in entities and "entity:zorro" not in entities
    maria = {v for v, _, _ in graph.neighbors("entity:maria", "entity", direction="both")}
    assert maria == {f"{C}/D1:4", f"{C}/D1:6", f"{C}/D2:4", f"{C}/D2:6"}  # one node across sessions
    assert graph.node(f"{C}/D1:3")["topic"] == "life"
    assert memory.stats()["backlog"] == 0 and memory.failed_steps == 0


def test_ablation_edge_types_are_not_built_and_skip_llm_calls():
    lm = ReplayLM(scripted)
    memory = make(lm, edge_types=("temporal",)).build(conversation().history())
    assert memory.graph.edges("causal") == [] and memory.graph.nodes("entity") == []
    assert memory.graph.edges("semantic") == []
    assert all("Event [0]" not in r.messages[-1]["content"] for r in lm.requests)


def test_a_failing_consolidation_step_is_counted_not_fatal():
    calls = {"n": 0}
    lock = threading.Lock()

    def flaky(request: ChatRequest) -> str:
        with lock:
            calls["n"] += 1
        if "Graph Memory Parser" in request.messages[-1]["content"] and "pottery" in request.messages[-1]["content"]:
            raise RuntimeError("server went away")
        return scripted(request)

    memory = make(ReplayLM(flaky)).build(conversation().history())
    assert memory.failed_steps == 2 and "server went away" in memory.errors[0]
    assert memory.backlog == 0 and len(memory.graph.nodes("event")) == 12


def test_why_question_walks_the_causal_edge_and_answers_in_causal_order():
    lm = ReplayLM(scripted)
    pipeline = make(lm, anchor_k=1)
    memory = pipeline.build(conversation().history())
    answer = pipeline.answer(memory, Query("q1", "Why did Ann miss her job interview?"))
    steps = {s["step"]: s for s in answer.trace.steps}
    assert steps["route"]["intent"] == "WHY"
    visited = steps["traverse"]["visited"]
    anchor = steps["traverse"]["anchors"][0]
    assert anchor.endswith(":3") and anchor.replace(":3", ":1") in visited
    order = steps["linearize"]["order"]
    assert order.index(anchor.replace(":3", ":1")) < order.index(anchor)
    assert re.search(rf"<t: \d+ May 2023> \[.*\] Ann: I missed my job interview .* <ref: {C}/D\d:3>", answer.context)
    assert answer.text == "Her car broke down."
    prompt = lm.requests[-1].messages[-1]["content"]
    assert "Extract the specific entity" in prompt  # single-hop instruction from the router
    assert len(answer.retrieved) == 12 and len({r.unit.id for r in answer.retrieved}) == 12


def test_retrieve_never_answers_and_ranks_to_recall_depth():
    lm = ReplayLM(scripted)
    pipeline = make(lm)
    memory = pipeline.build(conversation().history())
    before = len(lm.requests)
    ranking = pipeline.retrieve(memory, Query("q", "When did Bob start pottery classes?"))
    assert len(lm.requests) == before
    assert len(ranking) == min(12, RECALL_DEPTH) and all(r.unit.source_ids for r in ranking)


def test_token_budget_folds_low_salience_events():
    lm = ReplayLM(scripted)
    pipeline = make(lm, context_tokens=40)
    memory = pipeline.build(conversation().history())
    answer = pipeline.answer(memory, Query("q", "When did Bob start pottery classes with Maria?"))
    assert "intermediate events..." in answer.context
    assert len(answer.context.split()) < 80


def test_config_and_ablations_build():
    for config in ["pipelines/magma.yaml", "ablations/magma_no_adaptive_policy.yaml", "ablations/magma_causal_only.yaml"]:
        pipeline, _, _ = build_pipeline(REPO / "configs" / config, [])
        assert isinstance(pipeline, MAGMA)
    pipeline, _, _ = build_pipeline(REPO / "configs/ablations/magma_no_adaptive_policy.yaml", [])
    assert pipeline.traverser.weight.unique().numel() == 1
    assert len(pipeline.lms()) == 1
    pipeline, _, _ = build_pipeline(REPO / "configs/ablations/magma_causal_verdicts.yaml", [])
    assert isinstance(pipeline.consolidator, PromptedCausalVerdicts) and pipeline.consolidator.threshold == 0.5
    assert len(pipeline.lms()) == 1


@pytest.mark.slow
def test_magma_with_a_real_small_model(tmp_path):
    pytest.importorskip("llama_cpp")
    from memlab.data import load_sample
    from memlab.lm.errors import LMUnavailableError
    from memlab.lm.models import resolve_model

    try:
        resolve_model("smollm2-135m-instruct-q4_1")
    except LMUnavailableError as exc:
        pytest.skip(str(exc))
    overrides = ["answerer.lm.model=smollm2-135m-instruct-q4_1", "answerer.lm.n_ctx=2048",
                 f"answerer.lm.cache={tmp_path / 'cache.sqlite'}", "event_extractor.max_tokens=96", "event_extractor.max_items=2",
                 "consolidator.max_tokens=40", "consolidator.max_links=1", "consolidator.max_neighbours=3", "answerer.max_tokens=32", "context_tokens=300"]
    pipeline, _, _ = build_pipeline(REPO / "configs" / "pipelines" / "magma.yaml", overrides)
    sample = load_sample()[0]
    sessions = tuple(replace(s, turns=s.turns[:2]) for s in sample.sessions[:2])
    small = Conversation(sample.id, sample.speakers, sessions, sample.questions[:2])
    memory = pipeline.build(small.history())
    turn_ids = {t.id for _, t in small.turns()}
    assert len(memory.events()) == 4
    assert all(set(memory.graph.provenance(e)) <= turn_ids and memory.graph.provenance(e) for e in memory.events())
    assert memory.backlog == 0
    for question in small.questions:
        answer = pipeline.answer(memory, question.as_query())
        assert isinstance(answer.text, str)
        assert len(answer.retrieved) == 4
    lms = pipeline.lms()
    assert len(lms) == 1 and lms[0].usage.snapshot()["llm_calls"] > 0
    assert all(f.stage for f in pipeline.llm_usage().failures)
    print("magma smollm2:", memory.stats(), lms[0].usage.snapshot(), len(pipeline.llm_usage().failures), "failures")


def test_narrative_order_and_folding():
    from memlab.memory.graph import MemoryGraph
    from memlab.pipelines.magma.narrative import linearize, order_events

    g = MemoryGraph()
    for i, day in enumerate([3, 1, 2, 4]):
        g.add_node(f"e{i}", "event", text=f"event {i}", timestamp=datetime(2023, 5, day))
    g.add_edge("e0", "e1", "causal")  # e0 (3 May) caused e1 (1 May): the causal order wins for WHY
    events = ["e0", "e1", "e2", "e3"]
    assert order_events(g, events, "WHEN") == ["e1", "e2", "e0", "e3"]
    assert order_events(g, events, "WHY") == ["e2", "e0", "e1", "e3"]
    g.add_edge("e1", "e0", "causal")  # a cycle: time order
    assert order_events(g, events, "WHY") == ["e1", "e2", "e0", "e3"]
    text, kept = linearize(g, ["e1", "e2", "e0", "e3"], {"e1": 3, "e2": 0.1, "e0": 0.2, "e3": 2},
                           token_budget=20, count_tokens=lambda s: len(s.split()))
    assert kept == ["e1", "e3"]
    assert text.splitlines() == ["<t: 1 May 2023> event 1 <ref: e1>", "...2 intermediate events...",
                                 "<t: 4 May 2023> event 3 <ref: e3>"]


def test_worker_backlog_and_wait_timeout():
    from memlab.pipelines.magma.memory import MagmaMemory
    from memlab.types import MemoryUnit

    release = threading.Event()
    done: list[str] = []

    def step(item):  # the slow path's extraction call for event "e<i>" ("Ann: fact <i>")
        release.wait(5)
        done.append("e" + item.text.rsplit(" ", 1)[-1])

    memory = MagmaMemory(HashingEmbedder(), event_extractor=CallbackEventExtractor(step))
    for i in range(3):
        memory.ingest(MemoryUnit(f"e{i}", f"Ann: fact {i}", (f"D1:{i}",), datetime(2023, 5, 1 + i)))
    assert memory.backlog == 3 and not memory.wait_until_consolidated(timeout=0.1)
    assert memory.graph.num_nodes() == 3  # the fast path is done before any consolidation
    release.set()
    assert memory.wait_until_consolidated(timeout=5) and memory.backlog == 0
    memory.close()
    assert done == ["e0", "e1", "e2"]


def test_neighbourhood_sees_only_earlier_events_nearest_hop_then_most_recent_first():
    from memlab.pipelines.magma.memory import MagmaMemory
    from memlab.types import MemoryUnit

    memory = MagmaMemory(HashingEmbedder(), edge_types=("temporal", "entity"))  # no slow path
    for i in range(5):
        memory.ingest(MemoryUnit(f"e{i}", f"Ann: fact {i}", (f"D1:{i}",), datetime(2023, 5, 1)))
    memory.graph.add_node("entity:ann", "entity", text="Ann")
    for event in ("e0", "e2", "e4"):  # an entity node links e2 to an earlier and a later event
        memory.graph.add_edge(event, "entity:ann", "entity", directed=False)
    # temporal chain e0-e1-e2-e3-e4: from e2, hop 1 is e1 (e3 is later); hop 2 is e0 (via e1 or the entity)
    assert memory.neighbourhood("e2", hops=2) == ["e1", "e0"]
    assert memory.neighbourhood("e4", hops=2) == ["e3", "e2", "e0"]  # e2, e0 through the entity node
    assert memory.neighbourhood("e0", hops=2) == []


def test_router_slot_takes_a_prompted_router():
    from memlab.stages.route import PromptedRouter

    def script(request: ChatRequest) -> str:
        if "Classify the question" in request.messages[-1]["content"]:
            return json.dumps({"intent": "WHEN", "question_type": "temporal"})
        return scripted(request)

    lm = ReplayLM(script)
    pipeline = make(lm)
    pipeline.replace("router", PromptedRouter(lm))
    memory = pipeline.build(conversation().history())
    answer = pipeline.answer(memory, Query("q", "Why did Ann miss her job interview?"))
    route = next(s for s in answer.trace.steps if s["step"] == "route")
    assert (route["intent"], route["question_type"]) == ("WHEN", "temporal")
    assert "Output dates strictly in 'D Month YYYY' format" in lm.requests[-1].messages[-1]["content"]


def test_questions_answered_while_the_worker_consolidates():
    gate = threading.Event()

    def gated(request: ChatRequest) -> str:
        if "precision QA assistant" not in request.messages[-1]["content"]:
            assert gate.wait(10), "the test never opened the gate"
        return scripted(request)

    pipeline = make(ReplayLM(gated), consolidate_before_answering=False)
    memory = pipeline.build(conversation().history())
    assert len(memory.events()) == 12 and memory.backlog == 12  # ingested, none consolidated
    answer = pipeline.answer(memory, Query("q1", "Why did Ann miss her job interview?"))
    steps = {s["step"]: s for s in answer.trace.steps}
    assert answer.text == "Her car broke down." and steps["traverse"]["backlog"] == 12
    assert memory.graph.edges("causal") == []  # the question saw the graph before any slow-path edge
    gate.set()
    while memory.backlog:  # answer while edges are being added: every read is of a whole graph
        pipeline.answer(memory, Query("q2", "When did Bob start pottery classes with Maria?"))
    pipeline.release(memory)
    assert memory.backlog == 0 and memory.failed_steps == 0 and len(memory.graph.edges("causal")) == 2


def test_the_runner_releases_the_memory_and_records_how_it_changed(tmp_path):
    from memlab.eval.runner import RunOptions, run_benchmark

    gate = threading.Event()

    def gated(request: ChatRequest) -> str:
        if "precision QA assistant" in request.messages[-1]["content"]:
            gate.set()  # consolidation may start once the first question is being answered
        else:
            assert gate.wait(10)
        return scripted(request)

    pipeline = make(ReplayLM(gated), consolidate_before_answering=False)
    sample = conversation()
    questions = (Question("q1", "c1", "Why did Ann miss her job interview?", "car", "multi-hop", ("D1:1",)),)
    metrics = run_benchmark(pipeline, [replace(sample, questions=questions)], tmp_path, RunOptions(progress=False))
    stats = metrics["memory"]["c1"]
    assert stats["before_answering"]["backlog"] == 12 and stats["backlog"] == 0
    assert stats["causal_edges"] == 2 and stats["before_answering"]["causal_edges"] == 0


def test_a_multi_turn_event_carries_its_participants_as_speaker():
    from memlab.pipelines.magma.memory import event_speaker
    from memlab.types import MemoryUnit

    turn = MemoryUnit(id="t", text="Ann: hi", source_ids=("D1:1",), speaker="Ann")
    span = MemoryUnit(id="e", text="Ann: hi Bob: hello", source_ids=("D1:1", "D1:2"),
                      attributes={"participants": ["Ann", "Bob"]})
    assert event_speaker(turn) == "Ann" and event_speaker(span) == "Ann, Bob"
    assert event_speaker(MemoryUnit(id="x", text="...", source_ids=())) is None


def test_the_trained_causal_config_forms_causal_edges_with_no_llm_call():
    from memlab.data import load_sample
    from memlab.pipelines.magma.inspection import causal_links, sample_links
    from memlab.stages.consolidate import ClassifierCausalConsolidator

    config = REPO / "configs/ablations/magma_trained_causal.yaml"
    pipeline, _, _ = build_pipeline(config, ["event_extractor=null", "edge_types=[temporal,causal,semantic]"])
    assert isinstance(pipeline.consolidator, ClassifierCausalConsolidator)
    conversation = load_sample()[0]
    rows = causal_links(pipeline.build(conversation.history()), conversation.id)
    assert rows and all(row["hand_checked_causal"] is None and row["conversation"] == "sample-1" for row in rows)
    assert all(row["cause"] != row["effect"] and row["score"] > 0.5 for row in rows)
    assert len(sample_links(rows, 1)) == 1 and sample_links(rows, None) == rows
