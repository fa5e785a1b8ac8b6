from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from memlab.memory import BM25Index, IndexFileError, MetadataFilter, VectorIndex, rrf_fuse, tokenize
from memlab.types import MemoryUnit


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
