"""Search indexes over memory units: dense (faiss), lexical (BM25), their fusion, filters.

* ``VectorIndex``: inner-product search over L2-normalised vectors (cosine), string ids,
  optional restriction to a set of allowed ids that still returns up to ``k`` allowed results
  (faiss ID selectors filter *inside* the search, not after a global top-k). Exact up to
  ``EXACT_UP_TO`` vectors, approximate (IVF) above.
* ``BM25Index``: BM25 (bm25s) over lowercase word tokens, English stopwords removed,
  Porter-stemmed by default. Scores every document, so allowed-id filtering is exact too.
* ``rrf_fuse``: reciprocal-rank fusion of several rankings.
* ``MetadataFilter``: time range / speaker / entity / kind constraints on ``MemoryUnit``.

Both indexes are safe to query from several threads while another adds to them (each
holds a lock around its own state). A file that cannot be loaded raises ``IndexFileError``
naming the file.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path

import numpy as np

from memlab.errors import MemlabError
from memlab.types import MemoryUnit

DENSE_FILE = "dense.faiss"
DENSE_IDS_FILE = "dense_ids.json"
BM25_FILE = "bm25.json"


class IndexFileError(MemlabError, ValueError):
    """A saved index that is missing, malformed or inconsistent."""


# --------------------------------------------------------------------------------------
# Dense
# --------------------------------------------------------------------------------------
#: Above this many vectors a ``VectorIndex`` turns approximate. Exact search of 384-d vectors costs
#: ~5.5 ms per query at 100k on 2 cores and grows linearly, IVF ~0.6 ms for 3% of the exact top 10
#: (BENCHMARKS.md, "The memory layer at scale"); at 50k exact search is still ~3 ms, and every
#: conversation-sized memory (a LoCoMo conversation ~600 turns, a LongMemEval-S haystack ~550) stays exact.
EXACT_UP_TO = 50_000
#: Inverted lists an approximate index probes per query (of ~sqrt(n) lists).
NPROBE = 32


class VectorIndex:
    """Cosine search with string ids: exact, or approximate above ``exact_up_to`` vectors.

    Vectors are L2-normalised on the way in (queries too), so scores are cosines. Adding an
    id that is already present replaces its vector.

    Up to ``exact_up_to`` vectors the index is faiss ``IndexFlatIP`` (inside an
    ``IndexIDMap2``): exact. When an ``add`` takes it past that size it becomes an IVF index
    (``IndexIVFFlat``, spherical k-means into ~sqrt(n) lists, ``nprobe`` of them searched per
    query), and its lists are re-clustered each time the count doubles since the last
    clustering, so a list stays ~sqrt(n) long as memory grows. ``exact_up_to=None`` keeps it
    exact at any size. A search restricted to ``allowed`` ids stays exact while those ids are
    at most ``exact_up_to`` (their vectors are compared directly), so filters lose nothing.
    """

    def __init__(self, dim: int, exact_up_to: int | None = EXACT_UP_TO, nprobe: int = NPROBE) -> None:
        import faiss

        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        if exact_up_to is not None and exact_up_to < 1:
            raise ValueError(f"exact_up_to must be >= 1 or None, got {exact_up_to}")
        if nprobe < 1:
            raise ValueError(f"nprobe must be >= 1, got {nprobe}")
        self.dim = int(dim)
        self.exact_up_to = exact_up_to
        self.nprobe = int(nprobe)
        self._index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        #: Vectors in the index when its lists were last clustered (0 while exact).
        self._clustered_at = 0
        self._to_int: dict[str, int] = {}
        self._to_str: dict[int, str] = {}
        self._next = 0
        self._lock = threading.RLock()

    @property
    def approximate(self) -> bool:
        return self._clustered_at > 0

    def _check(self, vectors: np.ndarray, what: str) -> np.ndarray:
        from memlab.embed.base import l2_normalize

        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim == 1:
            vectors = vectors[None, :]
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"{what}: expected shape (n, {self.dim}), got {vectors.shape}")
        return l2_normalize(vectors)

    def add(self, ids: list[str], vectors: np.ndarray) -> None:
        ids = list(ids)
        vectors = self._check(vectors, "VectorIndex.add")
        if len(ids) != len(vectors):
            raise ValueError(f"VectorIndex.add: {len(ids)} ids for {len(vectors)} vectors")
        if len(set(ids)) != len(ids):
            raise ValueError("VectorIndex.add: duplicate ids in one call")
        with self._lock:
            replaced = [i for i in ids if i in self._to_int]
            if replaced:
                self.remove(replaced)
            numbers = np.arange(self._next, self._next + len(ids), dtype=np.int64)
            self._next += len(ids)
            if len(ids):
                self._index.add_with_ids(vectors, numbers)
            for name, number in zip(ids, numbers.tolist()):
                self._to_int[name] = number
                self._to_str[number] = name
            if self.exact_up_to is not None and len(self) > self.exact_up_to and len(self) >= 2 * self._clustered_at:
                self._cluster()

    def _cluster(self) -> None:
        """Rebuild as an IVF index over the current vectors (caller holds the lock)."""
        import faiss

        numbers = np.fromiter(self._to_str, dtype=np.int64, count=len(self._to_str))
        vectors = self._index.reconstruct_batch(numbers)
        lists = max(1, int(round(len(numbers) ** 0.5)))
        # 64 points per list is plenty for k-means; a fixed seed keeps builds reproducible.
        sample = np.random.default_rng(0).choice(len(numbers), size=min(len(numbers), 64 * lists), replace=False)
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(self.dim), self.dim, lists, faiss.METRIC_INNER_PRODUCT)
        index.cp.spherical = True
        index.cp.niter = 10
        index.train(vectors[np.sort(sample)])
        index.set_direct_map_type(faiss.DirectMap.Hashtable)  # reconstruct and remove by id
        index.add_with_ids(vectors, numbers)
        self._index = index
        self._clustered_at = len(numbers)

    def remove(self, ids: Iterable[str]) -> None:
        import faiss

        with self._lock:
            ids = list(ids)
            unknown = [i for i in ids if i not in self._to_int]
            if unknown:
                raise KeyError(f"VectorIndex.remove: unknown ids {unknown[:5]}")
            numbers = np.array([self._to_int.pop(i) for i in ids], dtype=np.int64)
            for number in numbers.tolist():
                del self._to_str[number]
            if len(numbers):
                # IVF's id hashtable removes only by an explicit array of ids.
                self._index.remove_ids(faiss.IDSelectorArray(numbers))

    def search(
        self, vectors: np.ndarray, k: int, allowed: set[str] | None = None
    ) -> list[list[tuple[str, float]]]:
        """Top ``k`` ``(id, cosine)`` per query row, best first; only ``allowed`` ids if given."""
        import faiss

        queries = self._check(vectors, "VectorIndex.search")
        with self._lock:
            numbers = None
            limit = len(self._to_int)
            if allowed is not None:
                numbers = np.array([self._to_int[i] for i in allowed if i in self._to_int], dtype=np.int64)
                limit = len(numbers)
            k = min(int(k), limit)
            if k <= 0:
                return [[] for _ in range(len(queries))]
            if self.approximate and numbers is not None and len(numbers) <= (self.exact_up_to or 0):
                scores, numbers = _exact_top_k(queries, self._index.reconstruct_batch(numbers), numbers, k)
            else:
                params = None
                if numbers is not None:
                    selector = faiss.IDSelectorBatch(numbers)  # kept referenced until the search ends
                    params = faiss.SearchParameters(sel=selector)
                if self.approximate:
                    params = faiss.SearchParametersIVF(sel=params.sel if params else None, nprobe=self.nprobe)
                scores, numbers = self._index.search(queries, k, params=params)
            return [
                [(self._to_str[int(n)], float(s)) for s, n in zip(row_s, row_n) if n >= 0]
                for row_s, row_n in zip(scores, numbers)
            ]

    def get(self, ids: Iterable[str]) -> np.ndarray:
        """The stored (normalised) vectors of ``ids``, shape ``(len(ids), dim)``."""
        with self._lock:
            ids = list(ids)
            for name in ids:
                if name not in self._to_int:
                    raise KeyError(f"VectorIndex.get: unknown id {name!r}")
            if not ids:
                return np.zeros((0, self.dim), dtype=np.float32)
            numbers = np.array([self._to_int[name] for name in ids], dtype=np.int64)
            return np.asarray(self._index.reconstruct_batch(numbers), dtype=np.float32).reshape(len(ids), self.dim)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._to_int)

    def __len__(self) -> int:
        return len(self._to_int)

    def __contains__(self, id: str) -> bool:
        return id in self._to_int

    def save(self, folder: str | Path) -> list[Path]:
        """Write ``dense.faiss`` and ``dense_ids.json`` into ``folder``; returns the paths."""
        import faiss

        folder = Path(folder)
        with self._lock:
            faiss.write_index(self._index, str(folder / DENSE_FILE))
            meta = {"dim": self.dim, "next": self._next, "exact_up_to": self.exact_up_to, "nprobe": self.nprobe,
                    "clustered_at": self._clustered_at, "ids": [[s, n] for s, n in self._to_int.items()]}
            (folder / DENSE_IDS_FILE).write_text(json.dumps(meta))
        return [folder / DENSE_FILE, folder / DENSE_IDS_FILE]

    @classmethod
    def load(cls, folder: str | Path) -> "VectorIndex":
        import faiss

        folder = Path(folder)
        try:
            meta = json.loads((folder / DENSE_IDS_FILE).read_text())
            index = faiss.read_index(str(folder / DENSE_FILE))
            # Indexes saved before the approximate switch carry no settings: the defaults.
            out = cls(meta["dim"], meta.get("exact_up_to", EXACT_UP_TO), meta.get("nprobe", NPROBE))
            clustered_at = int(meta.get("clustered_at", 0))
            meta["ids"], meta["next"]
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as e:
            raise IndexFileError(f"cannot read the dense index in {folder}: {type(e).__name__}: {e}") from None
        if index.d != out.dim or index.ntotal != len(meta["ids"]):
            raise IndexFileError(
                f"{folder / DENSE_FILE}: {index.ntotal} vectors of dim {index.d}, "
                f"but {DENSE_IDS_FILE} lists {len(meta['ids'])} ids of dim {out.dim}"
            )
        if isinstance(index, faiss.IndexIVF) != (clustered_at > 0):
            raise IndexFileError(f"{folder / DENSE_FILE}: a {type(index).__name__}, but {DENSE_IDS_FILE} says "
                                 f"the index was {'approximate' if clustered_at else 'exact'}")
        out._index = index
        out._clustered_at = clustered_at
        out._next = meta["next"]
        for name, number in meta["ids"]:
            out._to_int[name] = number
            out._to_str[number] = name
        return out


def _exact_top_k(
    queries: np.ndarray, vectors: np.ndarray, numbers: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` of ``vectors`` (ids ``numbers``) per query by inner product, as faiss returns them."""
    scores = queries @ vectors.T
    best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, best, axis=1), numbers[best]


# --------------------------------------------------------------------------------------
# Lexical
# --------------------------------------------------------------------------------------
#: English function words dropped before BM25 (a built-in list: no corpus download).
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your
    yours yourself yourselves s t d ll m re ve don didn doesn isn wasn weren won wouldn
    shouldn couldn hasn haven hadn aren ain let us also oh yeah ok okay
    """.split()
)
_WORD = re.compile(r"[^\W_]+")


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return _porter().stem(word)


@lru_cache(maxsize=1)
def _porter():
    from nltk.stem import PorterStemmer  # rule-based: needs no nltk data download

    return PorterStemmer()


def tokenize(text: str, stem: bool = True) -> list[str]:
    """Lowercase word tokens, stopwords removed, Porter-stemmed when ``stem``."""
    tokens = [t for t in _WORD.findall(text.lower()) if t not in STOPWORDS]
    return [_stem(t) for t in tokens] if stem else tokens


class BM25Index:
    """BM25 over unit texts (bm25s). ``add`` appends or replaces; the index is rebuilt lazily
    on the next search (rebuilding a few thousand short texts takes milliseconds)."""

    def __init__(self, stem: bool = True, k1: float = 1.5, b: float = 0.75, method: str = "lucene") -> None:
        self.stem = stem
        self.k1 = k1
        self.b = b
        self.method = method
        self._texts: dict[str, str] = {}
        self._tokens: dict[str, list[str]] = {}
        self._retriever = None
        self._order: list[str] = []
        self._position: dict[str, int] = {}
        self._lock = threading.RLock()

    def build(self, ids: list[str], texts: list[str]) -> "BM25Index":
        """Replace the contents with these documents."""
        with self._lock:
            self._texts.clear()
            self._tokens.clear()
            self.add(ids, texts)
        return self

    def add(self, ids: list[str], texts: list[str]) -> None:
        ids, texts = list(ids), list(texts)
        if len(ids) != len(texts):
            raise ValueError(f"BM25Index.add: {len(ids)} ids for {len(texts)} texts")
        tokens = [tokenize(t, self.stem) for t in texts]
        with self._lock:
            for name, text, toks in zip(ids, texts, tokens):
                self._texts[name] = text
                self._tokens[name] = toks
            self._retriever = None

    def remove(self, ids: Iterable[str]) -> None:
        with self._lock:
            for name in ids:
                if name not in self._texts:
                    raise KeyError(f"BM25Index.remove: unknown id {name!r}")
                del self._texts[name], self._tokens[name]
            self._retriever = None

    def _ensure_built(self) -> None:
        if self._retriever is not None:
            return
        import bm25s

        # bm25s lowers its own logger to DEBUG on import and logs every rebuild.
        logging.getLogger("bm25s").setLevel(logging.WARNING)

        self._order = list(self._texts)
        self._position = {name: i for i, name in enumerate(self._order)}
        retriever = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        if self._order:
            retriever.index([self._tokens[name] for name in self._order], show_progress=False)
        self._retriever = retriever

    def search(self, query: str, k: int, allowed: set[str] | None = None) -> list[tuple[str, float]]:
        """Top ``k`` ``(id, score)`` with a positive score, best first; ties keep insertion order."""
        query_tokens = tokenize(query, self.stem)
        with self._lock:
            if not query_tokens or not self._texts or k <= 0:
                return []
            self._ensure_built()
            scores = np.asarray(self._retriever.get_scores(query_tokens))
            if allowed is not None:
                kept = np.fromiter((self._position[i] for i in allowed if i in self._position), dtype=np.int64)
                masked = np.zeros_like(scores)
                masked[kept] = scores[kept]
                scores = masked
            best = _top_k_positive(scores, k)
            return [(self._order[i], float(scores[i])) for i in best]

    def __len__(self) -> int:
        return len(self._texts)

    def __contains__(self, id: str) -> bool:
        return id in self._texts

    def save(self, folder: str | Path) -> list[Path]:
        """Write ``bm25.json`` (settings + texts; the index is rebuilt on load, which is exact)."""
        path = Path(folder) / BM25_FILE
        with self._lock:
            settings = {"stem": self.stem, "k1": self.k1, "b": self.b, "method": self.method}
            path.write_text(json.dumps({**settings, "docs": [[i, t] for i, t in self._texts.items()]}))
        return [path]

    @classmethod
    def load(cls, folder: str | Path) -> "BM25Index":
        path = Path(folder) / BM25_FILE
        try:
            data = json.loads(path.read_text())
            out = cls(stem=data["stem"], k1=data["k1"], b=data["b"], method=data["method"])
            docs = data["docs"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise IndexFileError(f"cannot read the BM25 index {path}: {type(e).__name__}: {e}") from None
        out.add([d[0] for d in docs], [d[1] for d in docs])
        return out


def _top_k_positive(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` best positive scores, best first, ties by position.

    A partition finds the k-th best score, so a query with a very common word over a million
    documents sorts ``k`` of them, not every match.
    """
    candidates = np.flatnonzero(scores > 0)
    if len(candidates) > k:
        values = scores[candidates]
        kth = np.partition(values, len(values) - k)[len(values) - k]
        above = candidates[values > kth]
        candidates = np.concatenate([above, candidates[values == kth][: k - len(above)]])
    return candidates[np.lexsort((candidates, -scores[candidates]))]


# --------------------------------------------------------------------------------------
# Fusion and filters
# --------------------------------------------------------------------------------------
def rrf_fuse(
    rankings: list[list[str]], k: int = 60, weights: list[float] | None = None
) -> list[tuple[str, float]]:
    """Reciprocal-rank fusion: ``score(d) = sum_i w_i / (k + rank_i(d))``, ranks from 1.

    An id missing from a ranking gets nothing from it; a repeated id counts at its best rank.
    Ties keep the order of first appearance.
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"rrf_fuse: {len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights):
        seen: set[str] = set()
        for rank, name in enumerate(ranking, start=1):
            if name in seen:
                continue
            seen.add(name)
            scores[name] = scores.get(name, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda item: -item[1])


def _folded(values: Iterable[str] | str | None) -> frozenset[str] | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    folded = frozenset(str(v).casefold() for v in values)
    return folded or None


@dataclass(frozen=True)
class MetadataFilter:
    """Constraints a unit must meet; all given ones must hold (AND), any value of one (OR).

    * ``start`` / ``end``: inclusive bounds on ``unit.timestamp``; a unit without a timestamp
      fails a time constraint. Naive and timezone-aware datetimes cannot be compared (error).
    * ``speakers``: ``unit.speaker`` is one of them.
    * ``entities``: ``unit.attributes["entities"]`` (a list of str) shares one with them.
    * ``kinds``: ``unit.kind`` is one of them.

    Strings compare case-insensitively. ``None`` or an empty collection means no constraint.
    """

    start: datetime | None = None
    end: datetime | None = None
    speakers: frozenset[str] | None = None
    entities: frozenset[str] | None = None
    kinds: frozenset[str] | None = None

    def __post_init__(self) -> None:
        for name in ("speakers", "entities", "kinds"):
            object.__setattr__(self, name, _folded(getattr(self, name)))
        if self.start is not None and self.end is not None and self.start > self.end:
            raise ValueError(f"MetadataFilter: start {self.start} is after end {self.end}")

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, f) is None for f in ("start", "end", "speakers", "entities", "kinds"))

    def matches(self, unit: MemoryUnit) -> bool:
        if self.start is not None or self.end is not None:
            ts = unit.timestamp
            if ts is None:
                return False
            try:
                if (self.start is not None and ts < self.start) or (self.end is not None and ts > self.end):
                    return False
            except TypeError:
                raise ValueError(
                    f"MetadataFilter: cannot compare unit {unit.id!r} timestamp {ts.isoformat()} with the "
                    f"filter's range ({self.start}, {self.end}): mix of naive and timezone-aware datetimes"
                ) from None
        if self.speakers is not None and (unit.speaker or "").casefold() not in self.speakers:
            return False
        if self.kinds is not None and unit.kind.casefold() not in self.kinds:
            return False
        if self.entities is not None:
            entities = _folded(unit.attributes.get("entities")) or frozenset()
            if not entities & self.entities:
                return False
        return True
