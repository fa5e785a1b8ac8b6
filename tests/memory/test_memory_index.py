from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from memlab.memory import BM25Index, IndexFileError, MetadataFilter, UnitMemory, VectorIndex, rrf_fuse, tokenize
from memlab.types import MemoryUnit
from tests.memory.helpers import HashingEmbedder


def unit_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# -- VectorIndex ---------------------------------------------------------------------------
def test_vector_search_order_matches_brute_force():
    vectors = unit_vectors(50, 16)
    ids = [f"v{i}" for i in range(50)]
    index = VectorIndex(16)
    index.add(ids, vectors)
    queries = unit_vectors(3, 16, seed=1)
    results = index.search(queries, k=5)
    for query, hits in zip(queries, results):
        expected = np.argsort(-(vectors @ query))[:5]
        assert [h[0] for h in hits] == [ids[i] for i in expected]
        np.testing.assert_allclose([h[1] for h in hits], (vectors @ query)[expected], atol=1e-5)
    assert len(index) == 50 and "v3" in index
    assert index.search(queries[0], k=100)[0].__len__() == 50  # k beyond size: everything


def test_allowed_ids_return_k_allowed_results_outside_the_global_top_k():
    vectors = unit_vectors(200, 8)
    ids = [f"v{i}" for i in range(200)]
    index = VectorIndex(8)
    index.add(ids, vectors)
    query = vectors[0]
    order = [ids[i] for i in np.argsort(-(vectors @ query))]
    allowed = set(order[-10:])  # the 10 *least* similar: none is in the global top-k
    hits = index.search(query[None, :], k=4, allowed=allowed)[0]
    assert [h[0] for h in hits] == [i for i in order if i in allowed][:4]
    assert index.search(query[None, :], k=4, allowed={"v5", "nope"})[0][0][0] == "v5"
    assert index.search(query[None, :], k=4, allowed=set()) == [[]]


def test_vector_add_replaces_remove_get_and_shape_errors():
    index = VectorIndex(4)
    index.add(["a", "b"], np.eye(4, dtype=np.float32)[:2] * 3)  # normalised on the way in
    np.testing.assert_allclose(index.get(["a"]), [[1, 0, 0, 0]])
    index.add(["a"], np.array([[0, 0, 1, 0]], dtype=np.float32))
    assert len(index) == 2 and index.search(np.array([0, 0, 1, 0]), k=1)[0][0] == ("a", pytest.approx(1.0))
    index.remove(["b"])
    assert index.ids() == ["a"] and index.search(np.array([0, 1, 0, 0]), k=5)[0] == [("a", pytest.approx(0.0))]
    with pytest.raises(ValueError, match=r"expected shape \(n, 4\)"):
        index.add(["c"], np.ones((1, 5)))
    with pytest.raises(ValueError, match="2 ids for 1 vectors"):
        index.add(["c", "d"], np.ones((1, 4)))
    with pytest.raises(KeyError, match="zzz"):
        index.remove(["zzz"])


def test_vector_save_load_gives_identical_results(tmp_path):
    vectors = unit_vectors(30, 8)
    index = VectorIndex(8)
    index.add([f"v{i}" for i in range(30)], vectors)
    index.remove(["v3", "v7"])
    index.save(tmp_path)
    loaded = VectorIndex.load(tmp_path)
    queries = unit_vectors(4, 8, seed=2)
    assert loaded.search(queries, k=6) == index.search(queries, k=6)
    loaded.add(["new"], vectors[:1])  # ids keep counting after load: no collision
    assert len(loaded) == 29 and loaded.search(vectors[0], k=2)[0][0][0] in {"v0", "new"}
    (tmp_path / "dense_ids.json").write_text("{broken")
    with pytest.raises(IndexFileError, match="dense index"):
        VectorIndex.load(tmp_path)


def clustered_vectors(n: int, dim: int, centres: int = 40, seed: int = 0) -> np.ndarray:
    """Unit vectors around a few centres, like sentence embeddings (not uniform noise, on which
    no inverted index can be both fast and exact)."""
    rng = np.random.default_rng(seed)
    means = unit_vectors(centres, dim, seed=seed + 100)
    x = means[rng.integers(centres, size=n)] + 0.35 * rng.normal(size=(n, dim)).astype(np.float32) / dim**0.5
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_index_turns_approximate_above_the_threshold_with_the_same_top_results():
    vectors = clustered_vectors(3000, 16)
    ids = [f"v{i}" for i in range(3000)]
    exact = VectorIndex(16, exact_up_to=None)
    exact.add(ids, vectors)
    switched = VectorIndex(16, exact_up_to=1000, nprobe=8)
    switched.add(ids[:1000], vectors[:1000])
    assert not switched.approximate  # at the threshold: still exact
    switched.add(ids[1000:], vectors[1000:])
    assert switched.approximate and not exact.approximate and len(switched) == 3000
    queries = clustered_vectors(50, 16, seed=7)
    want, got = exact.search(queries, k=10), switched.search(queries, k=10)
    overlap = np.mean([len({i for i, _ in a} & {i for i, _ in b}) / 10 for a, b in zip(want, got)])
    assert overlap >= 0.95
    assert [h[0] for h in got[0][:3]] == [h[0] for h in want[0][:3]]
    # nprobe = every list: the approximate index is exact.
    everything = VectorIndex(16, exact_up_to=1000, nprobe=10_000)
    everything.add(ids, vectors)
    assert everything.approximate and [[i for i, _ in r] for r in everything.search(queries, k=10)] == [
        [i for i, _ in r] for r in want]


def test_approximate_index_replaces_removes_filters_exactly_and_saves(tmp_path):
    vectors = clustered_vectors(600, 8)
    ids = [f"v{i}" for i in range(600)]
    index = VectorIndex(8, exact_up_to=200, nprobe=4)
    index.add(ids[:300], vectors[:300])
    assert index.approximate
    index.add(ids[300:], vectors[300:])  # 600 >= 2 x 300: re-clustered
    assert index._clustered_at == 600
    index.add(["v1"], vectors[500:501])  # replaces
    np.testing.assert_allclose(index.get(["v1", "v2"]), np.stack([vectors[500], vectors[2]]), atol=1e-6)
    index.remove(["v2"])
    assert len(index) == 599 and "v2" not in index
    with pytest.raises(KeyError, match="v2"):
        index.get(["v2"])
    query = vectors[0]
    order = [ids[i] for i in np.argsort(-(vectors @ query)) if ids[i] not in {"v1", "v2"}]
    allowed = set(order[-20:])  # far from the query: outside every probed list
    assert [h[0] for h in index.search(query, k=5, allowed=allowed)[0]] == [i for i in order if i in allowed][:5]
    index.save(tmp_path)
    loaded = VectorIndex.load(tmp_path)
    assert loaded.approximate and (loaded.exact_up_to, loaded.nprobe) == (200, 4)
    queries = clustered_vectors(5, 8, seed=3)
    assert loaded.search(queries, k=7) == index.search(queries, k=7)
    meta = (tmp_path / "dense_ids.json").read_text().replace('"clustered_at": 600', '"clustered_at": 0')
    (tmp_path / "dense_ids.json").write_text(meta)
    with pytest.raises(IndexFileError, match="approximate|exact"):
        VectorIndex.load(tmp_path)


def test_memory_picks_the_approximate_index_above_its_size(tmp_path):
    units = [MemoryUnit(id=f"u{i}", text=f"note {i} about topic {i % 7}", source_ids=(f"D1:{i}",)) for i in range(60)]
    memory = UnitMemory(HashingEmbedder(), exact_up_to=50)
    memory.add(units)
    assert memory._dense_index().approximate
    memory.save(tmp_path / "m")
    loaded = UnitMemory.load(tmp_path / "m", HashingEmbedder())
    assert loaded._dense_index().approximate and loaded._dense_index().exact_up_to == 50
    assert [r.unit.id for r in loaded.search_dense("note 3 about topic 3", k=3)] == [
        r.unit.id for r in memory.search_dense("note 3 about topic 3", k=3)]


# -- BM25 ----------------------------------------------------------------------------------
DOCS = {
    "camp": "Melanie took her kids camping in the mountains last summer.",
    "paint": "Melanie painted a sunrise; painting relaxes her.",
    "adopt": "Caroline is researching adoption agencies.",
    "stop": "It is what it is, and that was that.",
}


def test_tokenize_lowercases_drops_stopwords_and_stems():
    assert tokenize("The Painter was PAINTING paintings!", stem=False) == ["painter", "painting", "paintings"]
    assert tokenize("The Painter was PAINTING paintings!") == ["painter", "paint", "paint"]
    assert tokenize("It is what it is") == []


def test_bm25_ranks_matching_documents_and_filters():
    index = BM25Index().build(list(DOCS), list(DOCS.values()))
    hits = index.search("When did Melanie paint?", k=10)
    assert hits[0][0] == "paint" and {h[0] for h in hits} == {"paint", "camp"}  # only term matches score
    assert hits[0][1] > hits[1][1] > 0
    assert [h[0] for h in index.search("adopting", k=3)] == ["adopt"]  # stemming: adopting ~ adoption
    assert [h[0] for h in index.search("Melanie painting", k=5, allowed={"camp", "adopt"})] == ["camp"]
    assert index.search("the and of", k=5) == []
    assert BM25Index().search("anything", k=3) == []


def test_bm25_top_k_keeps_insertion_order_among_ties_past_k():
    index = BM25Index(stem=False)
    index.add([f"d{i}" for i in range(40)], ["green tea"] * 20 + ["green"] * 5 + ["tea"] * 15)
    hits = index.search("green", k=7)
    assert [h[0] for h in hits] == [f"d{i}" for i in range(20, 25)] + ["d0", "d1"]  # shorter first, then order
    assert [h[0] for h in index.search("green", k=3, allowed={"d3", "d30", "d24", "d9"})] == ["d24", "d3", "d9"]


def test_bm25_add_remove_and_save_load(tmp_path):
    index = BM25Index(stem=False)
    index.add(["a"], ["red apples and green pears"])
    index.add(["b", "c"], ["green tea", "black coffee"])
    assert [h[0] for h in index.search("green", k=5)] == ["b", "a"]  # shorter document first
    index.add(["b"], ["oolong"])  # replaces
    assert [h[0] for h in index.search("green", k=5)] == ["a"]
    index.remove(["a"])
    assert index.search("green", k=5) == [] and len(index) == 2
    index.save(tmp_path)
    loaded = BM25Index.load(tmp_path)
    assert loaded.stem is False and loaded.search("black coffee", k=3) == index.search("black coffee", k=3)
    (tmp_path / "bm25.json").write_text("[]")
    with pytest.raises(IndexFileError, match="bm25.json"):
        BM25Index.load(tmp_path)


# -- fusion and filters --------------------------------------------------------------------
def test_rrf_fuse_hand_computed():
    fused = dict(rrf_fuse([["a", "b", "c"], ["b", "d"]], k=1))
    # a: 1/(1+1); b: 1/(1+2) + 1/(1+1); c: 1/(1+3); d: 1/(1+2)
    assert fused == pytest.approx({"a": 0.5, "b": 1 / 3 + 0.5, "c": 0.25, "d": 1 / 3})
    assert [i for i, _ in rrf_fuse([["a", "b", "c"], ["b", "d"]], k=1)] == ["b", "a", "d", "c"]
    weighted = dict(rrf_fuse([["a"], ["b"]], k=60, weights=[2.0, 1.0]))
    assert weighted == pytest.approx({"a": 2 / 61, "b": 1 / 61})
    assert dict(rrf_fuse([["a", "a", "b"]], k=0)) == pytest.approx({"a": 1.0, "b": 1 / 3})
    with pytest.raises(ValueError, match="weights"):
        rrf_fuse([["a"]], weights=[1.0, 2.0])


def make_unit(**kw) -> MemoryUnit:
    base = dict(id="u", text="t", source_ids=("D1:1",), timestamp=datetime(2023, 5, 7, 12), speaker="Caroline",
                kind="turn", attributes={"entities": ["Melanie", "LGBTQ group"]})
    return MemoryUnit(**{**base, **kw})


def test_metadata_filter():
    unit = make_unit()
    assert MetadataFilter().matches(unit) and MetadataFilter().is_empty
    assert MetadataFilter(start=datetime(2023, 5, 7, 12), end=datetime(2023, 5, 7, 12)).matches(unit)  # inclusive
    assert not MetadataFilter(start=datetime(2023, 5, 8)).matches(unit)
    assert not MetadataFilter(end=datetime(2023, 5, 6)).matches(unit)
    assert not MetadataFilter(start=datetime(2020, 1, 1)).matches(make_unit(timestamp=None))
    assert MetadataFilter(speakers=["caroline", "Bob"]).matches(unit)
    assert not MetadataFilter(speakers=["Melanie"]).matches(unit)
    assert MetadataFilter(entities=["melanie"]).matches(unit)
    assert not MetadataFilter(entities=["Caroline"]).matches(unit)
    assert not MetadataFilter(entities=["Melanie"]).matches(make_unit(attributes={}))
    assert MetadataFilter(kinds=["turn"]).matches(unit) and not MetadataFilter(kinds=["event"]).matches(unit)
    assert not MetadataFilter(speakers=["Caroline"], kinds=["event"]).matches(unit)  # AND across fields
    assert MetadataFilter(speakers=[]).is_empty
    with pytest.raises(ValueError, match="start .* is after end"):
        MetadataFilter(start=datetime(2024, 1, 1), end=datetime(2023, 1, 1))
    with pytest.raises(ValueError, match="naive and timezone-aware"):
        MetadataFilter(start=datetime(2023, 1, 1, tzinfo=timezone.utc)).matches(unit)
