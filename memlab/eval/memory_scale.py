"""The memory layer from 10k to 1M units: ingestion, queries, memory, save and load, graph
expansion (``eval/scale_memory.py`` runs each size in its own process and writes the table).
Units are LoCoMo turns, varied so that no two are the same: unit i is turn ``i mod T`` with
another speaker (from a pool of ``n / 100`` names), another date, and the first words of a
second random turn appended. Its vector is the real MiniLM vector of its turn plus 0.35 times
the second turn's, plus a little noise, normalised: encoding a million texts with MiniLM on 2
cores takes hours and is the embedder's cost, not the memory layer's, so the units' vectors are
looked up (``LookupEmbedder``) and the embedder's own speed is reported on its own line
(``encode units/s``, ``encode query ms``, real MiniLM). Queries are the data's questions, with
their real MiniLM query vectors.

Each (size, index) runs in its own process, so its resident memory is its own:

* ``exact``: ``UnitMemory(exact_up_to=None)``, faiss ``IndexFlatIP`` at every size;
* ``approximate``: ``exact_up_to=1``, IVF at every size (``nprobe`` = memlab's default), with
  its dense recall@10 against exact search;
* ``default`` (only when named in ``--modes``): memlab's own switch (``EXACT_UP_TO``), what a
  pipeline gets: the ``exact`` row up to that size, close to the ``approximate`` one above it;
* ``graph``: a MAGMA-style graph over the units (a temporal chain, 3 semantic edges per unit
  to units of the same turn, an entity edge to the unit's speaker, so a mean entity degree of
  100 at every size) and ``TraversalPolicy``'s beam search from the hybrid top 10 anchors.

Ingestion adds units in batches of 10,000 (``UnitMemory.add``: dense index, BM25 tokens,
units); the BM25 index is built on the first query after adds (timed as ``bm25 build s``).
Query latencies exclude query encoding (reported separately). One JSON line per run goes to
``OUT/scale.jsonl`` (a finished run is skipped when the script is run again) and the markdown
table to ``OUT/scale.md``.
"""

from __future__ import annotations

import gc
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from memlab.data import load_dataset
from memlab.dates import format_day
from memlab.embed import Embedder, SentenceTransformerEmbedder
from memlab.memory import MemoryGraph, UnitMemory
from memlab.memory.index import EXACT_UP_TO, tokenize
from memlab.stages.traverse import TraversalPolicy, TraverseIn
from memlab.types import MemoryUnit

MODES = ("exact", "approximate", "default", "graph")
BATCH = 10_000
SECOND_TURN_WEIGHT = 0.35
NOISE = 0.02
K = 10


class LookupEmbedder(Embedder):
    """Vectors computed beforehand, looked up by text (the benchmark's stand-in for an encoder)."""

    def __init__(self, vectors: dict[str, np.ndarray], dim: int) -> None:
        super().__init__()
        self.vectors = vectors
        self._d = dim

    def _load(self) -> None:
        pass

    def _encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])

    def _dim(self) -> int:
        return self._d

    def _count_tokens(self, text: str) -> int:
        return len(text.split())

    def _identity(self) -> dict[str, Any]:
        return {"class": "LookupEmbedder"}


# -- corpus ----------------------------------------------------------------------------------
def base_corpus(data: str, cache: Path) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """(turn texts, their MiniLM vectors, questions, their MiniLM query vectors), cached in ``cache``."""
    conversations = load_dataset(data)
    turns = [t.text for c in conversations for s in c.sessions for t in s.turns]
    questions = [q.text for c in conversations for q in c.questions]
    path = cache / "base_vectors.npz"
    if path.is_file():
        saved = np.load(path)
        return turns, saved["turns"], questions, saved["questions"]
    embedder = SentenceTransformerEmbedder()
    turn_vectors, question_vectors = embedder.encode(turns), embedder.encode_queries(questions)
    np.savez(path, turns=turn_vectors, questions=question_vectors)
    return turns, turn_vectors, questions, question_vectors


def varied_units(n: int, turns: list[str], turn_vectors: np.ndarray, seed: int = 0):
    """``n`` (unit, vector) pairs built from the turns (see the module docstring)."""
    rng = np.random.default_rng(seed)
    speakers = [f"Person{i}" for i in range(max(1, n // 100))]
    start = datetime(2020, 1, 1)
    second = rng.integers(len(turns), size=n)
    who = rng.integers(len(speakers), size=n)
    minutes = rng.integers(5 * 365 * 24 * 60, size=n)
    noise = rng.normal(scale=NOISE, size=(n, turn_vectors.shape[1])).astype(np.float32)
    vectors = turn_vectors[np.arange(n) % len(turns)] + SECOND_TURN_WEIGHT * turn_vectors[second] + noise
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    units = []
    for i in range(n):
        when = start + timedelta(minutes=int(minutes[i]))
        tail = " ".join(turns[second[i]].split()[:8])
        text = f"[{format_day(when.date())}] {speakers[who[i]]}: {turns[i % len(turns)]} {tail}"
        units.append(MemoryUnit(id=f"u{i}", text=text, source_ids=(f"u{i}",), timestamp=when,
                                speaker=speakers[who[i]]))
    return units, vectors


def lookup_embedder(units, vectors: np.ndarray, questions: list[str], question_vectors: np.ndarray) -> LookupEmbedder:
    """The units' and the questions' vectors, looked up by their text."""
    lookup = {u.text: v for u, v in zip(units, vectors)}
    lookup.update(zip(questions, question_vectors))
    return LookupEmbedder(lookup, vectors.shape[1])


# -- measurements ----------------------------------------------------------------------------
def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = 1000 * np.asarray(seconds)
    return {"p50": round(float(np.percentile(ms, 50)), 3), "p99": round(float(np.percentile(ms, 99)), 3)}


def timed(fn, inputs) -> tuple[list[float], list[Any]]:
    seconds, results = [], []
    for item in inputs:
        started = time.perf_counter()
        results.append(fn(item))
        seconds.append(time.perf_counter() - started)
    return seconds, results


def run_memory(n: int, mode: str, corpus, queries: int) -> dict[str, Any]:
    turns, turn_vectors, questions, question_vectors = corpus
    units, vectors = varied_units(n, turns, turn_vectors)
    embedder = lookup_embedder(units, vectors, questions, question_vectors)
    exact_up_to = {"exact": None, "approximate": 1, "default": EXACT_UP_TO}[mode]
    tokenize("warm up")  # loads the stemmer: a one-off second that is not ingestion
    gc.collect()
    before = rss_mb()
    memory = UnitMemory(embedder, exact_up_to=exact_up_to)
    started = time.perf_counter()
    for i in range(0, n, BATCH):
        memory.add(units[i:i + BATCH])
    ingest = time.perf_counter() - started
    started = time.perf_counter()
    memory.search_bm25(questions[0], K)
    bm25_build = time.perf_counter() - started
    resident = rss_mb() - before
    picked = np.random.default_rng(1).choice(len(questions), size=min(queries, len(questions)), replace=False)
    asked = [(questions[i], question_vectors[i]) for i in picked]
    dense_s, dense = timed(lambda q: memory.search_dense(q[1], K), asked)
    bm25_s, _ = timed(lambda q: memory.search_bm25(q[0], K), asked)
    hybrid_s, _ = timed(lambda q: memory.search_hybrid(q[0], K), asked)
    row = {"units": n, "index": mode, "approximate": memory._dense_index().approximate,
           "ingest_units_per_s": round(n / ingest), "bm25_build_s": round(bm25_build, 2),
           "rss_mb": round(resident), "dense_ms": percentiles(dense_s), "bm25_ms": percentiles(bm25_s),
           "hybrid_ms": percentiles(hybrid_s)}
    if memory._dense_index().approximate:
        row["dense_recall@10_vs_exact"] = round(exact_overlap(vectors, np.stack([q[1] for q in asked]), dense), 4)
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        started = time.perf_counter()
        memory.save(Path(tmp) / "memory")
        row["save_s"] = round(time.perf_counter() - started, 2)
        row["disk_mb"] = round(sum(f.stat().st_size for f in (Path(tmp) / "memory").iterdir()) / 2**20)
        memory = None  # freed before the reload is measured (the query lambdas above are done with it)
        gc.collect()
        started = time.perf_counter()
        loaded = UnitMemory.load(Path(tmp) / "memory", embedder)
        loaded.search_bm25(questions[0], K)  # loading is done when the first query can run
        row["load_s"] = round(time.perf_counter() - started, 2)
    return row


def exact_overlap(vectors: np.ndarray, queries: np.ndarray, hits) -> float:
    """Mean share of the exact top 10 that the index returned."""
    shares = []
    for start in range(0, len(queries), 100):
        scores = queries[start:start + 100] @ vectors.T
        best = np.argpartition(-scores, K, axis=1)[:, :K]
        for row, result in zip(best, hits[start:start + 100]):
            shares.append(len({f"u{i}" for i in row} & {h.unit.id for h in result}) / K)
    return float(np.mean(shares))


def run_graph(n: int, corpus, queries: int) -> dict[str, Any]:
    turns, turn_vectors, questions, question_vectors = corpus
    units, vectors = varied_units(n, turns, turn_vectors)
    embedder = lookup_embedder(units, vectors, questions, question_vectors)
    memory = UnitMemory(embedder)
    for i in range(0, n, BATCH):
        memory.add(units[i:i + BATCH])
    gc.collect()
    before = rss_mb()
    started = time.perf_counter()
    graph = MemoryGraph()
    for unit, vector in zip(units, vectors):
        graph.add_node(unit.id, "event", text=unit.text, timestamp=unit.timestamp, embedding=vector)
    for speaker in sorted({u.speaker for u in units}):
        graph.add_node(f"entity:{speaker}", "entity", text=speaker)
    period = len(turns)
    for i, unit in enumerate(units):
        if i + 1 < n:
            graph.add_edge(unit.id, f"u{i + 1}", "temporal")
        for step in (1, 2, 3):  # units of the same turn: the semantic neighbours
            if i + step * period < n:
                graph.add_edge(unit.id, f"u{i + step * period}", "semantic", directed=False)
        graph.add_edge(unit.id, f"entity:{unit.speaker}", "entity", directed=False)
    build = time.perf_counter() - started
    resident = rss_mb() - before
    policy = TraversalPolicy().eval()
    picked = np.random.default_rng(1).choice(len(questions), size=min(queries, len(questions)), replace=False)
    anchored = [(question_vectors[i], tuple((r.unit.id, r.score) for r in memory.search_hybrid(questions[i], K)))
                for i in picked]
    seconds, walks = timed(lambda item: policy([TraverseIn(graph, item[0], "ENTITY", item[1])])[0], anchored)
    return {"units": n, "index": "graph", "graph_nodes": graph.num_nodes(), "graph_edges": graph.num_edges(),
            "graph_build_s": round(build, 1), "graph_rss_mb": round(resident),
            "expansion_ms": percentiles(seconds),
            "visited_mean": round(float(np.mean([len(w.visited) for w in walks])), 1)}


def encoder_speed(corpus) -> dict[str, Any]:
    """Real MiniLM: units/s in batches and ms per single query (what the lookups leave out)."""
    turns, _, questions, _ = corpus
    embedder = SentenceTransformerEmbedder()
    embedder.encode(turns[:64])
    started = time.perf_counter()
    embedder.encode(turns[:2000])
    rate = 2000 / (time.perf_counter() - started)
    seconds, _ = timed(lambda q: embedder.encode_queries([q]), questions[:200])
    return {"index": "encoder", "embedder": "all-MiniLM-L6-v2", "encode_units_per_s": round(rate),
            "encode_query_ms": percentiles(seconds)}


# -- driver ----------------------------------------------------------------------------------
def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| units | index | ingest units/s | BM25 build s | RSS MB | disk MB | save s | load s "
             "| dense p50 / p99 ms | BM25 p50 / p99 ms | hybrid p50 / p99 ms | dense recall@10 vs exact |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["index"] in ("exact", "approximate", "default"):
            kind = r["index"] + (" (IVF)" if r["index"] == "default" and r["approximate"] else
                                 " (flat)" if r["index"] == "default" else "")
            lines.append(
                f"| {r['units']:,} | {kind} | {r['ingest_units_per_s']:,} | {r['bm25_build_s']} | {r['rss_mb']:,} "
                f"| {r['disk_mb']:,} | {r['save_s']} | {r['load_s']} | {r['dense_ms']['p50']} / {r['dense_ms']['p99']} "
                f"| {r['bm25_ms']['p50']} / {r['bm25_ms']['p99']} | {r['hybrid_ms']['p50']} / {r['hybrid_ms']['p99']} "
                f"| {r.get('dense_recall@10_vs_exact', 1.0)} |")
    graphs = [r for r in rows if r["index"] == "graph"]
    if graphs:
        lines += ["", "| units | graph nodes | graph edges | build s | RSS MB | expansion p50 / p99 ms "
                      "| nodes visited |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['units']:,} | {r['graph_nodes']:,} | {r['graph_edges']:,} | {r['graph_build_s']} "
                  f"| {r['graph_rss_mb']:,} | {r['expansion_ms']['p50']} / {r['expansion_ms']['p99']} "
                  f"| {r['visited_mean']} |" for r in graphs]
    for r in rows:
        if r["index"] == "encoder":
            lines += ["", f"Query encoding ({r['embedder']}, not in the latencies above): p50 "
                          f"{r['encode_query_ms']['p50']} ms, p99 {r['encode_query_ms']['p99']} ms; "
                          f"unit encoding {r['encode_units_per_s']:,} units/s."]
    return "\n".join(lines) + "\n"
