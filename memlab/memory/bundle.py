"""Saved folders of composite memories: several ``UnitMemory`` parts, one graph and a state.

A pipeline memory that is more than one ``UnitMemory`` (MAGMA's event graph, EMem's EDUs +
arguments) saves itself with ``save_bundle`` and reads itself back with ``load_bundle``::

    <folder>/manifest.json     format, format version, embedder identity, counts, parts,
                               sha256 of every other file (sub-folders included)
    <folder>/<part>/...        one saved UnitMemory per part (its own manifest inside)
    <folder>/graph.json        MemoryGraph.to_dict()
    <folder>/state.json        the memory's remaining fields (jsoncodec-encoded)

The folder handling is ``memlab.memory.store``'s (``memlab.fileio.atomic_folder``): written
into a temporary sibling folder, fsynced, then swapped in, so a failed save leaves the previous folder (or nothing) and no
temporary folder behind; loading verifies format, version, checksums and embedder identity
before anything is built and raises ``MemoryStoreError`` naming the folder and the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlab.embed.base import Embedder
from memlab.fileio import atomic_folder, is_subfolder_name
from memlab.memory.graph import GraphError, MemoryGraph
from memlab.memory.jsoncodec import decode_value, encode_value
from memlab.memory.store import (
    GRAPH_FILE,
    MANIFEST_FILE,
    MemoryStoreError,
    UnitMemory,
    _check_replaceable,
    check_embedder,
    read_manifest,
    write_manifest,
)

STATE_FILE = "state.json"


@dataclass
class Bundle:
    """What ``load_bundle`` returns: the parts by name, the graph, the decoded state."""

    parts: dict[str, UnitMemory]
    graph: MemoryGraph
    state: dict[str, Any]
    manifest: dict[str, Any]


def save_bundle(
    folder: str | os.PathLike,
    *,
    format: str,
    format_version: int,
    embedder: Embedder,
    parts: dict[str, UnitMemory],
    graph: MemoryGraph,
    state: dict[str, Any],
) -> Path:
    """Write the parts, graph and state into ``folder`` atomically (module docstring)."""
    folder = Path(folder)
    reserved = {MANIFEST_FILE, GRAPH_FILE, STATE_FILE}
    if reserved & set(parts):
        raise ValueError(f"part names {sorted(reserved & set(parts))} are reserved file names")
    _check_replaceable(folder)
    with atomic_folder(folder) as tmp:
        for name, part in parts.items():
            part.save(tmp / name)
        graph_dict = graph.to_dict()
        (tmp / GRAPH_FILE).write_text(json.dumps(graph_dict, ensure_ascii=False))
        (tmp / STATE_FILE).write_text(json.dumps(encode_value(state, "memory state"), ensure_ascii=False))
        counts = {f"{name}_units": len(part) for name, part in parts.items()}
        counts.update(units=sum(len(part) for part in parts.values()),
                      graph_nodes=len(graph_dict["nodes"]), graph_edges=len(graph_dict["edges"]))
        write_manifest(tmp, format, format_version, embedder, counts, parts=sorted(parts))
    return folder


def load_bundle(folder: str | os.PathLike, *, format: str, format_version: int, embedder: Embedder) -> Bundle:
    """Read a folder written by ``save_bundle``; every check passes before anything is built."""
    folder = Path(folder)
    manifest = read_manifest(folder, format=format, format_version=format_version, required=(GRAPH_FILE, STATE_FILE))
    check_embedder(folder, manifest, embedder)
    parts_names = manifest.get("parts")
    if not (isinstance(parts_names, list) and all(is_subfolder_name(name) for name in parts_names)):
        raise MemoryStoreError(f"{folder / MANIFEST_FILE}: malformed manifest ('parts' is not a list of sub-folder names)")
    parts = {name: UnitMemory.load(folder / name, embedder) for name in parts_names}
    try:
        graph = MemoryGraph.from_dict(json.loads((folder / GRAPH_FILE).read_text()))
    except (OSError, ValueError, GraphError) as e:
        raise MemoryStoreError(f"{folder}: cannot read {GRAPH_FILE}: {type(e).__name__}: {e}") from None
    try:
        state = decode_value(json.loads((folder / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError) as e:
        raise MemoryStoreError(f"{folder}: cannot read {STATE_FILE}: {type(e).__name__}: {e}") from None
    if not isinstance(state, dict):
        raise MemoryStoreError(f"{folder}: {STATE_FILE} does not hold an object")
    return Bundle(parts, graph, state, manifest)
