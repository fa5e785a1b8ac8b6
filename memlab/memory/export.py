"""A saved memory folder read back as one graph, for export (``memlab export-memory``).

Any folder the memory store wrote is read without the pipeline or the embedder that made it:
its manifest is checked first (format, version, every checksum), then its graph
(``graph.json``) is the export. A memory without a graph (``rag_turns``' turns, SimpleMem's
entries, a full-context memory) exports its units (``units.jsonl``, and those of each saved
part), each a node of its kind with its text, time and source turns. (A memory with a graph is
not mixed with its units: there a unit may be an edge, as Mnemis's facts are.) ``write_jsonl`` writes that
graph as JSON lines (one object per node, then one per edge; embeddings left out); GraphML is
``MemoryGraph.to_graphml``; the HTML view is ``memlab.memory.viewer``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from memlab import fileio
from memlab.fileio import MANIFEST_FILE, ManifestError, atomic_file
from memlab.memory.graph import GraphError, MemoryGraph
from memlab.memory.jsoncodec import unit_from_dict
from memlab.memory.store import GRAPH_FILE, UNITS_FILE, MemoryStoreError, _read_jsonl


def read_saved_graph(folder: str | os.PathLike) -> MemoryGraph:
    """The memory saved in ``folder`` as one graph (module docstring); ``MemoryStoreError`` naming
    the folder and the problem when it is not a saved memory, is corrupted, or holds nothing to show."""
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    if not path.is_file():
        raise MemoryStoreError(f"{folder}: no {MANIFEST_FILE}, so not a saved memory (memlab run --save-memory "
                               "writes one folder per conversation)")
    try:
        head = json.loads(path.read_text(encoding="utf-8"))
        manifest = fileio.read_manifest(folder, head["format"], head["format_version"])
    except (OSError, ValueError, KeyError, TypeError, ManifestError) as e:
        raise MemoryStoreError(f"{folder}: {e}") from None
    files = manifest["files"]
    try:
        graph = MemoryGraph.from_dict(json.loads((folder / GRAPH_FILE).read_text())) if GRAPH_FILE in files \
            else MemoryGraph()
        unit_files = [UNITS_FILE] * (UNITS_FILE in files) + [
            f"{part}/{UNITS_FILE}" for part in manifest.get("parts") or [] if f"{part}/{UNITS_FILE}" in files]
        for name in unit_files if not graph.nodes() else ():
            for row in _read_jsonl(folder / name):
                unit = unit_from_dict(row)
                if not graph.has_node(unit.id):
                    graph.add_node(unit.id, unit.kind, text=unit.text, timestamp=unit.timestamp,
                                   provenance=unit.source_ids, **({"speaker": unit.speaker} if unit.speaker else {}))
    except (OSError, ValueError, KeyError, TypeError, GraphError) as e:
        raise MemoryStoreError(f"{folder}: cannot read its contents: {type(e).__name__}: {e}") from None
    if not graph.nodes():
        raise MemoryStoreError(f"{folder}: a saved {manifest['format']} with no graph and no units to export")
    return graph


def write_jsonl(graph: MemoryGraph, path: str | os.PathLike) -> Path:
    """``graph`` as JSON lines, atomically: ``{"kind": "node", ...}`` per node, then ``{"kind": "edge", ...}``."""
    data = graph.to_dict()
    path = Path(path)
    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for node in data["nodes"]:
            f.write(json.dumps({"kind": "node", **{k: v for k, v in node.items() if k != "embedding"}},
                               ensure_ascii=False) + "\n")
        for edge in data["edges"]:
            f.write(json.dumps({"kind": "edge", **edge}, ensure_ascii=False) + "\n")
    return path
