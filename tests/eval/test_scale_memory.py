"""memlab.eval.memory_scale's measurements on a tiny corpus (the real table, eval/scale_memory.py, runs 10k-1M units)."""

from __future__ import annotations

import numpy as np

from memlab.eval import memory_scale as scale


def _corpus(dim: int = 16):
    rng = np.random.default_rng(0)
    turns = [f"turn {i} about {['tea', 'hiking', 'paint', 'dogs'][i % 4]} and day {i}" for i in range(40)]
    questions = ["who likes tea?", "when did they go hiking?", "what did she paint?"]
    unit = lambda n: (lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))(
        rng.normal(size=(n, dim)))
    return turns, unit(len(turns)), questions, unit(len(questions))


def test_varied_units_are_distinct_and_their_vectors_normalised():
    turns, vectors, _, _ = _corpus()
    units, unit_vectors = scale.varied_units(130, turns, vectors)
    assert len({u.text for u in units}) == 130 and len({u.id for u in units}) == 130
    assert units[45].text.split(": ", 1)[1].startswith(turns[5])  # unit i carries turn i mod T
    np.testing.assert_allclose(np.linalg.norm(unit_vectors, axis=1), 1.0, atol=1e-5)


def test_a_memory_run_reports_every_column_and_the_recall_of_the_approximate_index(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus = _corpus()
    exact = scale.run_memory(300, "exact", corpus, queries=3)
    approximate = scale.run_memory(300, "approximate", corpus, queries=3)
    assert not exact["approximate"] and approximate["approximate"]
    assert 0.0 <= approximate["dense_recall@10_vs_exact"] <= 1.0 and "dense_recall@10_vs_exact" not in exact
    for row in (exact, approximate):
        assert row["units"] == 300 and row["ingest_units_per_s"] > 0 and row["load_s"] >= 0
        assert set(row["hybrid_ms"]) == {"p50", "p99"}
    graph = scale.run_graph(300, corpus, queries=3)
    assert graph["graph_nodes"] == 300 + 3 and graph["visited_mean"] >= 1
    table = scale.table([exact, approximate, graph])
    assert "| 300 | exact |" in table and "| 300 | approximate |" in table and "| 300 | 303 |" in table
    assert list(tmp_path.iterdir()) == []  # the saved memories were temporary
