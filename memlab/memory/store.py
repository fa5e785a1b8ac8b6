"""``UnitMemory``: memory units with dense + BM25 indexes (and optionally a graph), saved safely.

Searching
---------
Units are indexed by ``unit.text`` as it is (a pipeline that wants speakers or dates to be
searchable puts them in the text, as ``Turn.render`` does). ``search_dense``,
``search_bm25`` and ``search_hybrid`` (dense + BM25 fused by reciprocal rank) return
``Retrieved`` lists, best first, optionally restricted by a ``MetadataFilter``; a filter is
applied inside the index search, so it still returns up to ``k`` matching units. Dense search
is exact up to ``exact_up_to`` units and approximate above (``VectorIndex``: IVF, ~97% of the
exact top 10 at 1M units); a filter that leaves at most ``exact_up_to`` units is searched
exactly at any size. ``add`` may run in one thread while others search; each call is atomic.

Saved folder
------------
``save(dir)`` writes ``units.jsonl`` (one unit per line, timestamps as ISO strings,
attributes kept), the dense index (``dense.faiss`` + ``dense_ids.json``, so loading does
not re-encode), ``bm25.json``, ``graph.json`` when there is a graph, and ``manifest.json``
(``memlab.fileio``'s, which stage checkpoints share): format and version, memlab and package
versions, the embedder identity, counts, and the sha256 of every other file.

The save is atomic (``memlab.fileio.atomic_folder``): everything is written into a temporary
sibling folder, which is fsynced and then takes the place of ``dir``; an existing ``dir`` is
moved aside only once the new folder is complete, and deleted after the swap. A failed save
leaves the previous folder as it was. ``save`` refuses to replace a non-empty folder that is
not a saved memory.

``UnitMemory.load(dir, embedder)`` raises ``MemoryStoreError`` naming the folder and the
problem when the folder is missing, has no manifest (not a memory, or a save that never
completed) or a malformed one, has another format version, was built with another embedder
identity (both are shown), or has a file that is missing, unlisted, or whose checksum does
not match (corrupted or truncated).
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from memlab import fileio
from memlab.embed.base import Embedder
from memlab.errors import MemlabError
from memlab.fileio import MANIFEST_FILE, ManifestError, atomic_folder, interrupted_backups
from memlab.memory.base import Memory
from memlab.memory.graph import GraphError, MemoryGraph
from memlab.memory.index import (
    BM25_FILE,
    DENSE_FILE,
    DENSE_IDS_FILE,
    EXACT_UP_TO,
    NPROBE,
    BM25Index,
    IndexFileError,
    MetadataFilter,
    VectorIndex,
    rrf_fuse,
)
from memlab.memory.jsoncodec import unit_from_dict, unit_to_dict
from memlab.memory.structure import span_structure
from memlab.types import MemoryUnit, Retrieved
from memlab.versions import package_versions

FORMAT = "memlab.UnitMemory"
FORMAT_VERSION = 1
UNITS_FILE = "units.jsonl"
GRAPH_FILE = "graph.json"
#: Packages whose versions are recorded in the manifest.
RECORDED_PACKAGES = ("memlab", "numpy", "faiss-cpu", "bm25s", "networkx", "torch", "sentence-transformers", "transformers")


class MemoryStoreError(MemlabError, RuntimeError):
    """A memory folder that cannot be saved or loaded (the message names folder and problem)."""


class UnitMemory(Memory):
    """Memory units + a dense ``VectorIndex`` + a ``BM25Index`` (+ an optional ``MemoryGraph``).

    See the module docstring for searching and for the saved folder.
    """

    def __init__(self, embedder: Embedder, graph: MemoryGraph | None = None,
                 exact_up_to: int | None = EXACT_UP_TO, nprobe: int = NPROBE) -> None:
        """``exact_up_to``, ``nprobe``: the dense index's switch to approximate search (``VectorIndex``)."""
        self.embedder = embedder
        self.graph = graph
        self.exact_up_to = exact_up_to
        self.nprobe = nprobe
        #: Units by id, in insertion order.
        self.units: dict[str, MemoryUnit] = {}
        self._dense: VectorIndex | None = None
        self._bm25 = BM25Index()
        self._lock = threading.RLock()

    @classmethod
    def build(cls, units: Iterable[MemoryUnit], embedder: Embedder, graph: MemoryGraph | None = None) -> "UnitMemory":
        memory = cls(embedder, graph)
        memory.add(units)
        return memory

    # -- growing -------------------------------------------------------------------------
    def add(self, units: Iterable[MemoryUnit]) -> None:
        """Add units (a unit whose id is present replaces it, keeping its position)."""
        units = list(units)
        for unit in units:
            if not isinstance(unit, MemoryUnit):
                raise TypeError(f"UnitMemory.add takes MemoryUnit objects, got {type(unit).__name__}")
        ids = [u.id for u in units]
        if len(set(ids)) != len(ids):
            duplicates = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"UnitMemory.add: duplicate unit ids in one call: {duplicates[:5]}")
        vectors = self.embedder.encode([u.text for u in units])  # outside the lock: the slow part
        with self._lock:
            dense = self._dense_index()
            dense.add(ids, vectors)
            self._bm25.add(ids, [u.text for u in units])
            for unit in units:
                self.units[unit.id] = unit

    def _dense_index(self) -> VectorIndex:
        if self._dense is None:
            self._dense = VectorIndex(self.embedder.dim, self.exact_up_to, self.nprobe)
        return self._dense

    # -- reading -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.units)

    def __contains__(self, id: str) -> bool:
        return id in self.units

    def get(self, id: str) -> MemoryUnit:
        try:
            return self.units[id]
        except KeyError:
            raise KeyError(f"no unit {id!r} in memory") from None

    def structure(self) -> dict[str, Any]:
        """The units' shape (``memlab.memory.structure``): how many of each kind, their turns and
        provenance, the sessions they come from."""
        with self._lock:
            units = list(self.units.values())
        kinds = Counter(u.kind for u in units)
        return {**span_structure(units, "unit"), "kinds": dict(sorted(kinds.items())), "degenerate": []}

    def vectors(self, ids: Iterable[str]) -> np.ndarray:
        """Stored (normalised) vectors of these units, one row each."""
        with self._lock:
            return self._dense_index().get(ids)

    def _allowed(self, filter: MetadataFilter | None) -> set[str] | None:
        if filter is None or filter.is_empty:
            return None
        return {i for i, unit in self.units.items() if filter.matches(unit)}

    def _query_vector(self, query: str | np.ndarray) -> np.ndarray:
        if isinstance(query, str):
            return self.embedder.encode_queries([query])
        vector = np.asarray(query, dtype=np.float32)
        if vector.ndim != 1:
            raise ValueError(f"a query vector must be 1-D, got shape {vector.shape}")
        return vector[None, :]

    def search_dense(
        self, query: str | np.ndarray, k: int, filter: MetadataFilter | None = None
    ) -> list[Retrieved]:
        """Top ``k`` units by cosine similarity to the query (text, or a vector of this embedder)."""
        vector = self._query_vector(query)
        with self._lock:
            hits = self._dense_index().search(vector, k, self._allowed(filter))[0]
            return [Retrieved(self.units[i], score) for i, score in hits]

    def search_bm25(self, query: str, k: int, filter: MetadataFilter | None = None) -> list[Retrieved]:
        """Top ``k`` units by BM25 (only units sharing a query term score above zero)."""
        with self._lock:
            hits = self._bm25.search(query, k, self._allowed(filter))
            return [Retrieved(self.units[i], score) for i, score in hits]

    def search_hybrid(
        self,
        query: str,
        k: int,
        candidates: int = 50,
        rrf_k: int = 60,
        filter: MetadataFilter | None = None,
    ) -> list[Retrieved]:
        """Top ``k`` by reciprocal-rank fusion of the dense and BM25 top ``candidates``.

        ``score`` is the fused RRF score.
        """
        if not isinstance(query, str):
            raise TypeError("search_hybrid needs the query text (BM25 cannot use a vector)")
        vector = self._query_vector(query)
        depth = max(candidates, k)
        with self._lock:
            allowed = self._allowed(filter)
            dense = self._dense_index().search(vector, depth, allowed)[0]
            lexical = self._bm25.search(query, depth, allowed)
            fused = rrf_fuse([[i for i, _ in dense], [i for i, _ in lexical]], k=rrf_k)
            return [Retrieved(self.units[i], score) for i, score in fused[:k]]

    # -- saving --------------------------------------------------------------------------
    def save(self, folder: str | os.PathLike) -> Path:
        """Write the memory into ``folder`` atomically (see the module docstring)."""
        folder = Path(folder)
        _check_replaceable(folder)
        with atomic_folder(folder) as tmp:
            with self._lock:
                _write_jsonl(tmp / UNITS_FILE, (unit_to_dict(u) for u in self.units.values()))
                self._dense_index().save(tmp)
                self._bm25.save(tmp)
                counts = {"units": len(self.units)}
                if self.graph is not None:
                    graph_dict = self.graph.to_dict()
                    (tmp / GRAPH_FILE).write_text(json.dumps(graph_dict, ensure_ascii=False))
                    counts.update(graph_nodes=len(graph_dict["nodes"]), graph_edges=len(graph_dict["edges"]))
            write_manifest(tmp, FORMAT, FORMAT_VERSION, self.embedder, counts)
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike, embedder: Embedder) -> "UnitMemory":
        """Load a saved memory, checking format, embedder identity and checksums first."""
        folder = Path(folder)
        manifest = read_manifest(folder, required=(UNITS_FILE, DENSE_FILE, DENSE_IDS_FILE, BM25_FILE))
        check_embedder(folder, manifest, embedder)
        try:
            units = [unit_from_dict(row) for row in _read_jsonl(folder / UNITS_FILE)]
            dense = VectorIndex.load(folder)
            bm25 = BM25Index.load(folder)
            graph = None
            if GRAPH_FILE in manifest["files"]:
                graph = MemoryGraph.from_dict(json.loads((folder / GRAPH_FILE).read_text()))
        except (OSError, IndexFileError, GraphError, ValueError, KeyError, TypeError) as e:
            raise MemoryStoreError(f"{folder}: cannot read its contents: {type(e).__name__}: {e}") from None
        ids = [u.id for u in units]
        if len(ids) != manifest["counts"]["units"] or set(ids) != set(dense.ids()) or len(bm25) != len(ids):
            raise MemoryStoreError(
                f"{folder}: inconsistent contents ({len(ids)} units, {len(dense)} vectors, {len(bm25)} BM25 "
                f"documents, manifest says {manifest['counts']['units']} units)"
            )
        if dense.dim != embedder.dim:
            raise MemoryStoreError(f"{folder}: vectors have dim {dense.dim}, the embedder gives {embedder.dim}")
        memory = cls(embedder, graph, dense.exact_up_to, dense.nprobe)
        memory.units = {u.id: u for u in units}
        memory._dense = dense
        memory._bm25 = bm25
        return memory

    def __repr__(self) -> str:
        graph = f", graph={self.graph!r}" if self.graph is not None else ""
        return f"UnitMemory(units={len(self.units)}{graph})"


# -- folder helpers ----------------------------------------------------------------------
def read_manifest(folder: Path, format: str = FORMAT, format_version: int = FORMAT_VERSION,
                  required: Iterable[str] = ()) -> dict[str, Any]:
    """The manifest of a saved memory folder, after checking format, version, that it lists the
    ``required`` files and every checksum (``format``/``format_version``: what the caller reads;
    composite memories pass theirs)."""
    if not folder.is_dir():
        leftovers = interrupted_backups(folder)
        hint = f" (a previous version was left at {leftovers[-1].name} by an interrupted save)" if leftovers else ""
        raise MemoryStoreError(f"{folder}: no such memory folder{hint}")
    if not (folder / MANIFEST_FILE).is_file():
        raise MemoryStoreError(
            f"{folder}: no {MANIFEST_FILE}; not a saved memory, or a save that did not complete"
        )
    try:
        manifest = fileio.read_manifest(folder, format, format_version, required, remedy="; rebuild the memory")
    except ManifestError as e:
        raise MemoryStoreError(str(e)) from None
    counts = manifest.get("counts")
    if not (isinstance(counts, dict) and isinstance(counts.get("units"), int)):
        raise MemoryStoreError(f"{folder / MANIFEST_FILE}: malformed manifest ('counts' has no number of units)")
    return manifest


def write_manifest(
    tmp: Path, format: str, format_version: int, embedder: Embedder, counts: dict[str, int], **extra: Any,
) -> None:
    """Last step of a save whose files are all in ``tmp``: write the manifest (``extra`` keys
    added) with the sha256 of every file, sub-folders included."""
    fileio.write_manifest(tmp, format, format_version, package_versions(RECORDED_PACKAGES),
                          embedder=embedder.identity, counts=counts, **extra)


def check_embedder(folder: Path, manifest: dict[str, Any], embedder: Embedder) -> None:
    """Refuse a memory saved with an embedder of another identity (both are shown)."""
    expected = _jsonable(embedder.identity)
    if manifest.get("embedder") != expected:
        raise MemoryStoreError(
            f"{folder}: built with another embedder.\n  saved:   {json.dumps(manifest.get('embedder'), sort_keys=True)}"
            f"\n  current: {json.dumps(expected, sort_keys=True)}"
        )


def _check_replaceable(folder: Path) -> None:
    if not folder.exists():
        return
    if not folder.is_dir():
        raise MemoryStoreError(f"{folder}: exists and is not a folder; refusing to replace it")
    if any(folder.iterdir()) and not (folder / MANIFEST_FILE).is_file():
        raise MemoryStoreError(f"{folder}: a non-empty folder that is not a saved memory; refusing to replace it")


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise ValueError(f"{path.name} line {number}: {e}") from None
    return rows


def _jsonable(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists ...), for comparisons."""
    return json.loads(json.dumps(value))
