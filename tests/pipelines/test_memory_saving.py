"""Save/load of MAGMA's and EMem's memories: round trip, corruption, embedder and atomicity."""

from __future__ import annotations

import threading

import pytest

from memlab.memory.store import MemoryStoreError
from memlab.pipelines.emem.memory import EduMemory
from memlab.pipelines.magma.memory import MagmaMemory
from memlab.types import MemoryUnit, Query
from tests.fakes import CallbackEventExtractor, ReplayLM
from tests.memory.helpers import HashingEmbedder
from tests.pipelines import test_emem, test_magma

QUESTIONS = [
    Query("q1", "Why did Ann miss her job interview?"),
    Query("q2", "Who teaches Bob pottery?"),
    Query("q3", "What is the name of the puppy Ann adopted?"),
]


def ranking(pipeline, memory, query):
    ranked = [(r.unit.id, round(r.score, 6)) for r in pipeline.retrieve(memory, query)]
    assert ranked, "an empty ranking would make the comparison vacuous"
    return ranked


def test_magma_round_trip_gives_identical_retrieval(tmp_path):
    pipeline = test_magma.make(ReplayLM(test_magma.scripted))
    memory = pipeline.build(test_magma.conversation().history())
    memory.save(tmp_path / "magma")
    loaded = MagmaMemory.load(tmp_path / "magma", HashingEmbedder())
    assert loaded.graph.to_dict() == memory.graph.to_dict()
    assert loaded.stats() == memory.stats() and loaded.edge_types == memory.edge_types
    assert loaded.graph.edges("causal") and loaded.graph.nodes("entity")
    for query in QUESTIONS:
        assert ranking(pipeline, loaded, query) == ranking(pipeline, memory, query)
    # the fast path goes on from the saved temporal tail
    loaded.ingest(MemoryUnit(id=f"{test_magma.C}/D3:1", text="Ann sold her car.", source_ids=("D3:1",)))
    assert (f"{test_magma.C}/D2:6", f"{test_magma.C}/D3:1") in {(u, v) for u, v, _ in loaded.graph.edges("temporal")}


def test_magma_refuses_to_save_with_a_backlog(tmp_path):
    release = threading.Event()
    memory = MagmaMemory(HashingEmbedder(), event_extractor=CallbackEventExtractor(lambda item: release.wait(5)))
    memory.ingest(MemoryUnit(id="e1", text="Ann went to Boston.", source_ids=("D1:1",)))
    try:
        with pytest.raises(MemoryStoreError, match="not yet consolidated.*wait_until_consolidated"):
            memory.save(tmp_path / "m")
        assert not (tmp_path / "m").exists()
    finally:
        release.set()
        memory.close()
    memory.save(tmp_path / "m")
    assert len(MagmaMemory.load(tmp_path / "m", HashingEmbedder()).events()) == 1


def emem_memory():
    pipeline = test_emem.emem_g(ReplayLM(test_emem.scripted))
    return pipeline, pipeline.build(test_emem.conversation().history())


def test_emem_round_trip_gives_identical_retrieval(tmp_path):
    pipeline, memory = emem_memory()
    memory.save(tmp_path / "emem")
    loaded = EduMemory.load(tmp_path / "emem", HashingEmbedder())
    assert loaded.frames == memory.frames and loaded.errors == memory.errors
    assert loaded.node_ids == memory.node_ids and (loaded.adjacency != memory.adjacency).nnz == 0
    for query in QUESTIONS:
        assert ranking(pipeline, loaded, query) == ranking(pipeline, memory, query)


@pytest.mark.parametrize("victim", ["graph.json", "state.json", "edus/units.jsonl", "arguments/dense.faiss"])
def test_a_corrupted_or_truncated_file_is_refused_by_name(tmp_path, victim):
    _, memory = emem_memory()
    memory.save(tmp_path / "emem")
    path = tmp_path / "emem" / victim
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(MemoryStoreError, match=f"file {victim} is corrupted or truncated"):
        EduMemory.load(tmp_path / "emem", HashingEmbedder())


def test_another_embedder_or_format_is_refused(tmp_path):
    _, memory = emem_memory()
    memory.save(tmp_path / "emem")
    with pytest.raises(MemoryStoreError, match="another embedder"):
        EduMemory.load(tmp_path / "emem", HashingEmbedder(salt="x"))
    with pytest.raises(MemoryStoreError, match="holds 'memlab.EMem.EventMemory', not 'memlab.MagmaMemory'"):
        MagmaMemory.load(tmp_path / "emem", HashingEmbedder())


def test_a_failed_save_leaves_no_folder_and_keeps_the_previous_one(tmp_path, monkeypatch):
    _, memory = emem_memory()
    target = tmp_path / "emem"

    def broken(self):
        raise RuntimeError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(type(memory.graph), "to_dict", broken)
        with pytest.raises(RuntimeError, match="disk full"):
            memory.save(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    memory.save(target)
    before = sorted(p.relative_to(target).as_posix() for p in target.rglob("*"))
    memory.errors["session_9"] = "changed"
    with monkeypatch.context() as patch:
        patch.setattr(type(memory.graph), "to_dict", broken)
        with pytest.raises(RuntimeError):
            memory.save(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emem"]
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == before
    assert "session_9" not in EduMemory.load(target, HashingEmbedder()).errors
