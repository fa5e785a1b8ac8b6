"""Every memory reports its shape: the ``structure`` block, its numbers on hand-built memories,
and the block of each of the five systems built on the embedded sample with a replaying LM."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from memlab.config import build_pipeline
from memlab.data import load_dataset
from memlab.data.prefix import first_sessions
from memlab.memory.graph import MemoryGraph
from memlab.memory.store import UnitMemory
from memlab.pipelines.compassmem.memory import EventMemory
from memlab.pipelines.compassmem.topics import TopicLayer
from memlab.pipelines.magma.memory import MagmaMemory
from memlab.types import MemoryUnit
from tests.fakes import ReplayLM
from tests.memory.helpers import HashingEmbedder
from tests.pipelines.test_no_label_in_prompts import plausible, with_lm

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "memlab" / "data" / "samples" / "sample_locomo.json"


def event(id: str, session: str, turns: tuple[str, ...], provenance: str | None = None) -> MemoryUnit:
    attributes = {"session": session, **({"provenance": provenance} if provenance else {})}
    return MemoryUnit(id, f"event {id} in {session}", turns, datetime(2023, 5, 8), "event", attributes=attributes)


def test_compassmem_structure_counts_edges_across_sessions_turns_and_provenance():
    memory = EventMemory(HashingEmbedder(), TopicLayer(threshold=0.99))
    for unit in (event("a", "s1", ("D1:1", "D1:2"), "stated"), event("b", "s1", ("D1:3",), "guessed"),
                 event("c", "s2", ("D2:1", "D2:2", "D2:3"), "filled"), event("d", "s2", ("D2:4", "D2:5"))):
        memory.add_event(unit)
    memory.update_topics(["a", "b", "c", "d"])
    memory.link("a", "b", "causes")
    memory.link("b", "c", "precedes")  # crosses from session s1 to s2
    structure = memory.structure()
    assert structure["events"] == 4 and structure["sessions"] == 2
    assert structure["mean_turns_per_event"] == 2.0 and structure["single_turn_event_share"] == 0.25
    assert structure["cited_provenance_share"] == 0.5  # "stated" and no attribute: a turn span
    assert structure["guessed_provenance_share"] == 0.25 and structure["filled_provenance_share"] == 0.25
    assert structure["attached_turn_share"] == 0.0
    assert structure["relation_edges"] == 2 and structure["relation_edges_per_event"] == 0.5
    assert structure["cross_session_edges"] == 1 and structure["cross_session_edge_share"] == 0.5
    assert structure["largest_component_share"] == 0.75  # a-b-c joined, d alone
    assert structure["degenerate"] == []
    for n in range(20):  # 1 edge of 21 crossing sessions: under 5%
        memory.add_event(event(f"x{n}", "s1", ("D1:4", "D1:5")))
        memory.link("a", f"x{n}", "causes")
    assert memory.structure()["degenerate"] == ["only 1 of 22 relation edges cross sessions"]
    memory.graph.remove_edge("b", "c", "relation", "precedes")
    assert memory.structure()["degenerate"] == ["no relation edge crosses sessions"]


def test_compassmem_structure_flags_turn_level_events_guessed_provenance_and_no_edges():
    memory = EventMemory(HashingEmbedder())
    for i in range(5):
        memory.add_event(event(f"e{i}", "s1", (f"D1:{i}",), "guessed"))
    assert memory.structure()["degenerate"] == ["no relation edge", "100% of events are single turns",
                                                "only 0% of events cite their turns"]
    assert memory.structure()["topics"] == 0 and memory.structure()["singleton_topic_share"] is None


def test_magma_structure_names_each_edge_space_and_the_speakers():
    memory = MagmaMemory(HashingEmbedder(), edge_types=("temporal", "causal"))
    for i, (session, speaker) in enumerate([("s1", "Ann"), ("s1", None), ("s2", "Bob")]):
        memory.ingest(MemoryUnit(f"e{i}", f"text {i}", (f"D{i}:1",), datetime(2023, 5, 8), speaker=speaker,
                                 attributes={"session": session}))
    structure = memory.structure()
    assert structure["events"] == 3 and structure["sessions"] == 2 and structure["temporal_edges"] == 2
    assert structure["causal_edges"] == 0 and structure["causal_edges_per_session"] == 0
    assert structure["speaker_share"] == pytest.approx(2 / 3) and structure["components"] == 1
    assert structure["degenerate"] == ["the causal graph is empty"]
    memory.graph.add_edge("e0", "e1", "causal", directed=True)
    assert memory.structure()["causal_edges_per_session"] == 0.5 and memory.structure()["degenerate"] == []


def test_unit_memory_structure_and_graph_components():
    memory = UnitMemory(HashingEmbedder())
    memory.add([MemoryUnit("t1", "a", ("D1:1",), attributes={"session": "s1"}),
                MemoryUnit("c1", "b", ("D1:2", "D1:3"), kind="chunk", attributes={"session": "s1"})])
    structure = memory.structure()
    assert structure["units"] == 2 and structure["kinds"] == {"chunk": 1, "turn": 1}
    assert structure["mean_turns_per_unit"] == 1.5 and structure["single_turn_unit_share"] == 0.5
    graph = MemoryGraph()
    for node in "abcd":
        graph.add_node(node, "x" if node != "d" else "y")
    graph.add_edge("a", "b", "r")
    graph.add_edge("b", "d", "s")
    assert graph.component_sizes() == [3, 1] and graph.component_sizes("x") == [2, 1]
    assert graph.component_sizes(edge_types="s") == [2, 1, 1]


#: The keys each system's block must carry (the issue's names are kept as they are).
SYSTEM_KEYS = {
    "compassmem": {"cross_session_edge_share", "mean_turns_per_event", "cited_provenance_share", "topics",
                   "singleton_topic_share", "merged_events", "relation_edges_per_event"},
    "magma": {"causal_edges", "temporal_edges", "semantic_edges", "entity_edges", "speaker_share"},
    "simplemem": {"units", "mean_turns_per_unit", "synthesis_merges", "abstracts", "units_per_session"},
    "emem": {"edus", "edus_per_turn", "arguments_per_edu", "components", "largest_component_share"},
    "mnemis": {"entities", "layers", "categories_per_layer", "largest_category_share_per_layer",
               "invalidated_fact_share"},
}


@pytest.mark.parametrize("system", sorted(SYSTEM_KEYS))
def test_each_system_reports_its_structure_in_its_memory_stats(system):
    pipeline = with_lm(build_pipeline(REPO / "configs" / "pipelines" / f"{system}.yaml")[0], ReplayLM(plausible))
    conversation = first_sessions(load_dataset(SAMPLE)[0], 2)
    memory = pipeline.build(conversation.history())
    try:
        stats = pipeline.memory_stats(memory)
    finally:
        pipeline.release(memory)
    structure = stats["structure"]
    assert SYSTEM_KEYS[system] <= set(structure), SYSTEM_KEYS[system] - set(structure)
    assert isinstance(structure["degenerate"], list)
    shares = {k: v for k, v in structure.items() if k.endswith("_share") and v is not None}
    assert all(0 <= v <= 1 for v in shares.values()), shares
    json.dumps(structure)  # it goes into metrics.json as it is
