from __future__ import annotations

import json
import threading
from datetime import datetime

import numpy as np
import pytest

import memlab.memory.store as store_module
from memlab.embed import HFMeanPoolingEmbedder
from memlab.embed.sentence_transformers import default_model_path
from memlab.memory import BM25Index, MemoryGraph, MemoryStoreError, MetadataFilter, UnitMemory
from memlab.types import MemoryUnit
from tests.memory.helpers import HashingEmbedder, make_units


def ids(results):
    return [r.unit.id for r in results]


def test_build_and_search(units, hashing):
    memory = UnitMemory.build(units, hashing)
    assert list(memory.units) == [u.id for u in units] and len(memory) == 6
    assert ids(memory.search_dense("support group", k=2))[0] == "u0"
    assert ids(memory.search_bm25("pottery bowl", k=3)) == ["u5"]
    hybrid = memory.search_hybrid("adoption agencies children", k=3)
    assert ids(hybrid)[0] == "u2" and len(hybrid) == 3
    assert hybrid[0].score == pytest.approx(2 / 61)  # first in both rankings, rrf_k=60
    assert all(a.score >= b.score for a, b in zip(hybrid, hybrid[1:]))
    # A query vector works too, and gives the same ranking as its text.
    vector = hashing.encode(["support group"])[0]
    assert ids(memory.search_dense(vector, k=6)) == ids(memory.search_dense("support group", k=6))


def test_filters_apply_inside_the_search(units, hashing):
    memory = UnitMemory.build(units, hashing)
    only_melanie = MetadataFilter(speakers=["Melanie"])
    for search in (memory.search_dense, memory.search_hybrid):
        found = search("Caroline support group adoption counseling", k=3, filter=only_melanie)
        assert len(found) == 3 and {r.unit.speaker for r in found} == {"Melanie"}
    june = MetadataFilter(start=datetime(2023, 6, 1), end=datetime(2023, 6, 30))
    assert ids(memory.search_bm25("Caroline", k=5, filter=june)) == ["u4"]  # the only June unit naming Caroline
    assert set(ids(memory.search_dense("anything", k=5, filter=june))) == {"u4", "u5"}


def test_add_grows_and_replaces(units, hashing):
    memory = UnitMemory.build(units[:3], hashing)
    memory.add(units[3:])
    assert len(memory) == 6 and ids(memory.search_bm25("pottery", k=1)) == ["u5"]
    memory.add([MemoryUnit(id="u1", text="Melanie: I ran a marathon.", source_ids=("D1:2",))])
    assert list(memory.units)[1] == "u1" and len(memory) == 6
    assert ids(memory.search_bm25("marathon", k=2)) == ["u1"] and memory.search_bm25("sunrise", k=2) == []
    with pytest.raises(ValueError, match="duplicate"):
        memory.add([units[0], units[0]])
    with pytest.raises(TypeError, match="MemoryUnit"):
        memory.add(["not a unit"])


def test_concurrent_add_and_search(hashing):
    memory = UnitMemory.build(make_units(), hashing)
    errors = []

    def grow():
        try:
            for i in range(200):
                memory.add([MemoryUnit(id=f"x{i}", text=f"note number {i} about gardening", source_ids=(f"D9:{i}",))])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    writer = threading.Thread(target=grow)
    writer.start()
    while writer.is_alive():
        for r in memory.search_hybrid("gardening note", k=5):
            assert r.unit.id in memory.units
    writer.join()
    assert not errors and len(memory) == 206


def test_save_load_round_trip(units, hashing, tmp_path):
    graph = MemoryGraph()
    graph.add_node("e0", "event", "support group", datetime(2023, 5, 7), provenance=["D1:1"])
    graph.add_node("e1", "event", "adoption", datetime(2023, 5, 25), provenance=["D2:1"])
    graph.add_edge("e0", "e1", "temporal")
    memory = UnitMemory.build(units, hashing, graph=graph)
    folder = memory.save(tmp_path / "mem")
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["bm25.json", "dense.faiss", "dense_ids.json", "graph.json", "manifest.json", "units.jsonl"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["embedder"] == hashing.identity and manifest["counts"] == {"units": 6, "graph_nodes": 2, "graph_edges": 1}
    assert set(manifest["files"]) == set(names) - {"manifest.json"} and "faiss-cpu" in manifest["versions"]
    assert json.loads((folder / "units.jsonl").read_text().splitlines()[0])["timestamp"] == "2023-05-07T13:56:00"

    fresh = HashingEmbedder()
    loaded = UnitMemory.load(folder, fresh)
    assert fresh.encoded == 0  # vectors come from disk, not re-encoded
    assert list(loaded.units.values()) == units
    assert [u.attributes for u in loaded.units.values()] == [u.attributes for u in units]  # datetimes kept
    for query in ("support group", "Melanie kids camping beach", "pottery"):
        for name in ("search_dense", "search_bm25", "search_hybrid"):
            assert getattr(loaded, name)(query, k=4) == getattr(memory, name)(query, k=4)
    assert loaded.graph.edges() == graph.edges() and loaded.graph.provenance("e1") == ("D2:1",)
    np.testing.assert_array_equal(loaded.vectors(["u2"]), memory.vectors(["u2"]))


def test_save_replaces_previous_version_and_leaves_no_temp(units, hashing, tmp_path):
    UnitMemory.build(units[:2], hashing).save(tmp_path / "mem")
    UnitMemory.build(units, hashing).save(tmp_path / "mem")
    assert len(UnitMemory.load(tmp_path / "mem", hashing)) == 6
    assert [p.name for p in tmp_path.iterdir()] == ["mem"]


def test_corrupted_file_is_refused(units, hashing, tmp_path):
    folder = UnitMemory.build(units, hashing).save(tmp_path / "mem")
    data = bytearray((folder / "dense.faiss").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "dense.faiss").write_bytes(bytes(data))
    with pytest.raises(MemoryStoreError, match=r"mem: file dense.faiss is corrupted or truncated"):
        UnitMemory.load(folder, hashing)


def test_truncated_file_is_refused(units, hashing, tmp_path):
    folder = UnitMemory.build(units, hashing).save(tmp_path / "mem")
    text = (folder / "units.jsonl").read_text()
    (folder / "units.jsonl").write_text(text[: len(text) // 2])
    with pytest.raises(MemoryStoreError, match="units.jsonl is corrupted or truncated"):
        UnitMemory.load(folder, hashing)


def test_other_embedder_identity_is_refused_naming_both(units, hashing, tmp_path):
    folder = UnitMemory.build(units, hashing).save(tmp_path / "mem")
    with pytest.raises(MemoryStoreError, match="another embedder") as error:
        UnitMemory.load(folder, HashingEmbedder(salt="v2"))
    assert '"salt": ""' in str(error.value) and '"salt": "v2"' in str(error.value)
    with pytest.raises(MemoryStoreError, match="another embedder"):
        UnitMemory.load(folder, HashingEmbedder(dim=64))


def test_half_written_missing_and_foreign_folders(units, hashing, tmp_path):
    folder = UnitMemory.build(units, hashing).save(tmp_path / "mem")
    (folder / "manifest.json").unlink()
    with pytest.raises(MemoryStoreError, match="no manifest.json; not a saved memory, or a save that did not complete"):
        UnitMemory.load(folder, hashing)
    with pytest.raises(MemoryStoreError, match="nowhere: no such memory folder"):
        UnitMemory.load(tmp_path / "nowhere", hashing)
    # A non-empty folder that is not a memory is never replaced by a save.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "thesis.tex").write_text("precious")
    with pytest.raises(MemoryStoreError, match="refusing to replace"):
        UnitMemory.build(units, hashing).save(tmp_path / "docs")
    assert (tmp_path / "docs" / "thesis.tex").read_text() == "precious"


def test_other_format_version_is_refused(units, hashing, tmp_path):
    folder = UnitMemory.build(units, hashing).save(tmp_path / "mem")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["format_version"] = 99
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(MemoryStoreError, match="format version 99"):
        UnitMemory.load(folder, hashing)


def test_failing_save_leaves_the_previous_folder_intact(units, hashing, tmp_path, monkeypatch):
    before = UnitMemory.build(units[:3], hashing)
    folder = before.save(tmp_path / "mem")
    snapshot = {p.name: p.read_bytes() for p in folder.iterdir()}

    def disk_full(self, folder):
        (folder / "bm25.json").write_text('{"partial": ')  # half a file, then the failure
        raise OSError("No space left on device")

    monkeypatch.setattr(BM25Index, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        UnitMemory.build(units, hashing).save(folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == snapshot
    assert [p.name for p in tmp_path.iterdir()] == ["mem"]  # the temporary folder is gone
    monkeypatch.undo()
    loaded = UnitMemory.load(folder, hashing)
    assert len(loaded) == 3 and loaded.search_hybrid("adoption", k=2) == before.search_hybrid("adoption", k=2)


def test_failing_swap_restores_the_previous_folder(units, hashing, tmp_path, monkeypatch):
    folder = UnitMemory.build(units[:3], hashing).save(tmp_path / "mem")
    real_rename = store_module.os.rename
    calls = []

    def rename(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # old folder already moved aside; the new one fails to move in
            raise OSError("simulated crash")
        real_rename(src, dst)

    monkeypatch.setattr(store_module.os, "rename", rename)
    with pytest.raises(OSError, match="simulated crash"):
        UnitMemory.build(units, hashing).save(folder)
    monkeypatch.undo()
    assert len(UnitMemory.load(folder, hashing)) == 3
    assert [p.name for p in tmp_path.iterdir()] == ["mem"]


@pytest.mark.slow
def test_real_minilm_memory_search_and_identity_check(minilm, tmp_path):
    units = make_units()
    memory = UnitMemory.build(units, minilm)
    # No word in common with u5 ("pottery class ... bowl"), only meaning.
    assert ids(memory.search_dense("ceramics lessons", k=1)) == ["u5"]
    assert ids(memory.search_hybrid("Which agencies is Caroline looking into to adopt kids?", k=1)) == ["u2"]
    folder = memory.save(tmp_path / "mem")
    loaded = UnitMemory.load(folder, minilm)
    assert loaded.search_hybrid("painting at dawn", k=3) == memory.search_hybrid("painting at dawn", k=3)
    other = HFMeanPoolingEmbedder(str(default_model_path()), max_length=256)
    with pytest.raises(MemoryStoreError, match="HFMeanPoolingEmbedder"):
        UnitMemory.load(folder, other)
