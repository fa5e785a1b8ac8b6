"""A typed multigraph of memory: nodes and edges carry types, text, time and provenance.

Model
-----
* A **node** has a string ``id``, a ``type`` ("event", "entity", "edu", "category" ...),
  ``text``, an optional ``timestamp``, ``provenance`` (the ids of the source turns it was
  made from: what makes evidence recall exact), an optional ``embedding`` and free
  attributes. ``node(id)`` returns all of them as one flat dict.
* An **edge** has a ``type`` ("temporal", "causal", "semantic", "entity" ...), an optional
  ``label`` (e.g. a relation phrase), a ``weight`` and free attributes. Between two nodes
  there is at most one edge per ``(type, label)``; adding it again updates it.
* **Undirected edges** are stored once, with ``directed=False``, and are followed both ways:
  ``neighbors(v, direction="out")`` includes an undirected edge whichever end ``v`` is, and so
  does ``direction="in"``. ``edges()`` and ``num_edges()`` count such an edge once;
  ``to_pyg`` emits it in both directions (the PyG convention). Directed edges (MAGMA's
  causal edges, a temporal chain) are followed only forward by ``"out"``.

Thread safety
-------------
Every public method takes one re-entrant lock, so each call is atomic: a reader running
while another thread adds edges sees a graph either before or after each ``add_edge``, never
a half-added edge. Readers return copies, so a result never changes under its holder. A
sequence of reads that must see one consistent graph (a whole traversal) holds the lock
with ``with graph.locked():`` or works on ``graph.snapshot()``, an independent copy.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from memlab.errors import MemlabError
from memlab.fileio import atomic_file
from memlab.memory.jsoncodec import decode_time, decode_value, encode_time, encode_value

#: Node fields kept apart from the free attributes.
NODE_FIELDS = ("type", "text", "timestamp", "provenance", "embedding")
#: Edge fields kept apart from the free attributes.
EDGE_FIELDS = ("type", "label", "weight", "directed")
FORMAT_VERSION = 1


class GraphError(MemlabError, ValueError):
    """An operation the graph cannot do (dangling edge, node type clash, bad data)."""


class MemoryGraph:
    """A typed multigraph on ``networkx.MultiDiGraph`` (see the module docstring)."""

    def __init__(self) -> None:
        self._g = nx.MultiDiGraph()
        self._lock = threading.RLock()

    # -- building ------------------------------------------------------------------------
    def add_node(
        self,
        id: str,
        type: str,
        text: str = "",
        timestamp: datetime | None = None,
        provenance: Iterable[str] = (),
        embedding: np.ndarray | None = None,
        **attributes: Any,
    ) -> None:
        """Add a node, or update an existing one of the same type.

        On update: ``text``, ``timestamp`` and ``embedding`` are replaced when given (non-empty /
        not None), provenance ids are added to the existing ones, attributes are merged.
        """
        if not isinstance(id, str) or not id:
            raise GraphError(f"node ids must be non-empty str, got {id!r}")
        if not isinstance(type, str) or not type:
            raise GraphError(f"node {id!r}: type must be a non-empty str, got {type!r}")
        if timestamp is not None and not isinstance(timestamp, datetime):
            raise GraphError(f"node {id!r}: timestamp must be a datetime, got {timestamp!r}")
        if isinstance(provenance, str):
            provenance = (provenance,)
        vector = None if embedding is None else np.asarray(embedding, dtype=np.float32).reshape(-1)
        with self._lock:
            if id in self._g:
                data = self._g.nodes[id]
                if data["type"] != type:
                    raise GraphError(f"node {id!r} exists with type {data['type']!r}, cannot re-add as {type!r}")
                if text:
                    data["text"] = text
                if timestamp is not None:
                    data["timestamp"] = timestamp
                data["provenance"] = _union(data["provenance"], provenance)
                if vector is not None:
                    data["embedding"] = vector
                data.update(attributes)
            else:
                self._g.add_node(
                    id,
                    type=type,
                    text=text,
                    timestamp=timestamp,
                    provenance=_union((), provenance),
                    embedding=vector,
                    **attributes,
                )

    def add_edge(
        self,
        src: str,
        dst: str,
        type: str,
        label: str | None = None,
        weight: float = 1.0,
        directed: bool = True,
        **attributes: Any,
    ) -> None:
        """Add (or update) the edge ``src -[type, label]-> dst``; both nodes must exist."""
        if not isinstance(type, str) or not type:
            raise GraphError(f"edge {src!r}->{dst!r}: type must be a non-empty str, got {type!r}")
        key = (type, label)
        with self._lock:
            for end in (src, dst):
                if end not in self._g:
                    raise GraphError(f"edge {src!r} -[{type}]-> {dst!r}: no node {end!r} (add nodes first)")
            if not directed and not self._g.has_edge(src, dst, key) and self._g.has_edge(dst, src, key):
                src, dst = dst, src  # the undirected edge is already stored the other way round
            data = dict(attributes, type=type, label=label, weight=float(weight), directed=bool(directed))
            if self._g.has_edge(src, dst, key):
                self._g.edges[src, dst, key].update(data)
            else:
                self._g.add_edge(src, dst, key=key, **data)

    def add_provenance(self, id: str, source_ids: Iterable[str]) -> None:
        with self._lock:
            data = self._node_data(id)
            data["provenance"] = _union(data["provenance"], source_ids)

    def set_attributes(self, id: str, **attributes: Any) -> None:
        reserved = set(attributes) & set(NODE_FIELDS)
        if reserved:
            raise GraphError(f"node {id!r}: {sorted(reserved)} are fields, set them with add_node")
        with self._lock:
            self._node_data(id).update(attributes)

    def remove_edge(self, src: str, dst: str, type: str, label: str | None = None) -> None:
        key = (type, label)
        with self._lock:
            if self._g.has_edge(src, dst, key):
                self._g.remove_edge(src, dst, key)
            elif self._g.has_edge(dst, src, key) and not self._g.edges[dst, src, key]["directed"]:
                self._g.remove_edge(dst, src, key)
            else:
                raise KeyError(f"no edge {src!r} -[{type}, {label!r}]-> {dst!r}")

    def remove_node(self, id: str) -> None:
        """Remove a node and every edge touching it."""
        with self._lock:
            self._node_data(id)
            self._g.remove_node(id)

    # -- reading -------------------------------------------------------------------------
    def has_node(self, id: str) -> bool:
        with self._lock:
            return id in self._g

    __contains__ = has_node

    def node(self, id: str) -> dict[str, Any]:
        """A copy of the node's fields and attributes, with its ``id``."""
        with self._lock:
            return {"id": id, **_copy_data(self._node_data(id))}

    def node_type(self, id: str) -> str:
        with self._lock:
            return self._node_data(id)["type"]

    def provenance(self, id: str) -> tuple[str, ...]:
        with self._lock:
            return self._node_data(id)["provenance"]

    def nodes(self, type: str | None = None) -> list[str]:
        """Node ids in insertion order, optionally of one type."""
        with self._lock:
            return [n for n, t in self._g.nodes(data="type") if type is None or t == type]

    def edges(self, type: str | None = None) -> list[tuple[str, str, dict[str, Any]]]:
        """``(src, dst, data)`` of every edge (undirected ones once), optionally of one type."""
        with self._lock:
            return [
                (u, v, _copy_data(d)) for u, v, d in self._g.edges(data=True) if type is None or d["type"] == type
            ]

    def neighbors(
        self,
        id: str,
        edge_types: str | Iterable[str] | None = None,
        direction: str = "out",
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """``(neighbour id, edge type, edge data)`` for the edges leaving (``"out"``), entering
        (``"in"``) or touching (``"both"``) node ``id``; undirected edges count as both.

        The edge data is a copy that also names the stored ``src`` and ``dst``.
        """
        if direction not in ("out", "in", "both"):
            raise GraphError(f"direction must be 'out', 'in' or 'both', got {direction!r}")
        wanted = {edge_types} if isinstance(edge_types, str) else None if edge_types is None else set(edge_types)
        with self._lock:
            self._node_data(id)
            found: list[tuple[str, str, dict[str, Any]]] = []
            for u, v, d in self._g.out_edges(id, data=True):
                if (direction != "in" or not d["directed"]) and (wanted is None or d["type"] in wanted):
                    found.append((v, d["type"], {**_copy_data(d), "src": u, "dst": v}))
            for u, v, d in self._g.in_edges(id, data=True):
                if u == v and (direction != "in" or not d["directed"]):
                    continue  # a self-loop the out-edge pass already listed
                if (direction != "out" or not d["directed"]) and (wanted is None or d["type"] in wanted):
                    found.append((u, d["type"], {**_copy_data(d), "src": u, "dst": v}))
            return found

    def num_nodes(self, type: str | None = None) -> int:
        with self._lock:
            if type is None:
                return self._g.number_of_nodes()
            return sum(1 for _, t in self._g.nodes(data="type") if t == type)

    def num_edges(self, type: str | None = None) -> int:
        with self._lock:
            if type is None:
                return self._g.number_of_edges()
            return sum(1 for _, _, t in self._g.edges(data="type") if t == type)

    def component_sizes(self, node_types: str | Iterable[str] | None = None,
                        edge_types: str | Iterable[str] | None = None) -> list[int]:
        """Sizes of the weakly connected components, largest first, of the subgraph of the nodes
        of ``node_types`` (all: None) joined by edges of ``edge_types`` (all: None)."""
        kinds = {node_types} if isinstance(node_types, str) else None if node_types is None else set(node_types)
        wanted = {edge_types} if isinstance(edge_types, str) else None if edge_types is None else set(edge_types)
        with self._lock:
            nodes = [n for n, t in self._g.nodes(data="type") if kinds is None or t in kinds]
            kept = set(nodes)
            sub = nx.Graph()
            sub.add_nodes_from(nodes)
            sub.add_edges_from((u, v) for u, v, d in self._g.edges(data=True)
                               if u in kept and v in kept and (wanted is None or d["type"] in wanted))
            return sorted((len(c) for c in nx.connected_components(sub)), reverse=True)

    def __len__(self) -> int:
        return self.num_nodes()

    def node_types(self) -> list[str]:
        with self._lock:
            return list(dict.fromkeys(t for _, t in self._g.nodes(data="type")))

    def edge_types(self) -> list[str]:
        with self._lock:
            return list(dict.fromkeys(t for _, _, t in self._g.edges(data="type")))

    # -- consistency ---------------------------------------------------------------------
    @contextmanager
    def locked(self) -> Iterator["MemoryGraph"]:
        """Hold the graph's lock for a sequence of reads (no writer gets in meanwhile)."""
        with self._lock:
            yield self

    def snapshot(self) -> "MemoryGraph":
        """An independent deep copy, taken atomically."""
        copy_ = MemoryGraph()
        with self._lock:
            copy_._g = copy.deepcopy(self._g)
        return copy_

    # -- conversion ----------------------------------------------------------------------
    def to_pyg(self, embeddings: dict[str, np.ndarray] | None = None):
        """The graph as a ``torch_geometric.data.HeteroData``.

        One node type per node type here, one edge type per ``(src type, edge type, dst type)``;
        undirected edges appear in both directions. ``data[t].node_ids`` lists the node ids of
        type ``t`` in row order, so model outputs map back to nodes. ``data[t].x`` holds the
        vectors from ``embeddings`` (falling back on each node's own ``embedding``) when every
        node of the type has one; a type where only some nodes have one is an error.
        ``data[edge_type].edge_weight`` holds the weights.
        """
        import torch
        from torch_geometric.data import HeteroData

        embeddings = embeddings or {}
        with self._lock:
            ids_by_type: dict[str, list[str]] = {}
            for n, t in self._g.nodes(data="type"):
                ids_by_type.setdefault(t, []).append(n)
            row = {n: i for ids in ids_by_type.values() for i, n in enumerate(ids)}
            data = HeteroData()
            for t, ids in ids_by_type.items():
                data[t].node_ids = list(ids)
                data[t].num_nodes = len(ids)
                vectors = [embeddings.get(n, self._g.nodes[n]["embedding"]) for n in ids]
                have = [v is not None for v in vectors]
                if all(have):
                    data[t].x = torch.as_tensor(np.stack([np.asarray(v, dtype=np.float32).reshape(-1) for v in vectors]))
                elif any(have):
                    missing = [n for n, h in zip(ids, have) if not h]
                    raise GraphError(
                        f"to_pyg: {len(missing)} of {len(ids)} {t!r} nodes have no embedding (e.g. {missing[:3]})"
                    )
            relations: dict[tuple[str, str, str], tuple[list[int], list[int], list[float]]] = {}
            for u, v, d in self._g.edges(data=True):
                pairs = [(u, v)] if d["directed"] or u == v else [(u, v), (v, u)]
                for a, b in pairs:
                    rel = (self._g.nodes[a]["type"], d["type"], self._g.nodes[b]["type"])
                    src, dst, weight = relations.setdefault(rel, ([], [], []))
                    src.append(row[a])
                    dst.append(row[b])
                    weight.append(d["weight"])
        for rel, (src, dst, weight) in relations.items():
            data[rel].edge_index = torch.tensor([src, dst], dtype=torch.long)
            data[rel].edge_weight = torch.tensor(weight, dtype=torch.float32)
        return data

    def to_graphml(self, path: str | Path) -> Path:
        """Write the graph as GraphML (Gephi, yEd, networkx) to ``path``, atomically.

        GraphML holds scalars only: every node and edge field becomes a string, number or
        boolean attribute (times as ISO strings, lists and dicts as JSON, ``None`` left out),
        embeddings are omitted; node ids are kept and each edge is keyed ``type`` or
        ``type:label``, so parallel edges of different labels stay apart.
        """
        path = Path(path)
        with self._lock:
            out = nx.MultiDiGraph()
            for n, d in self._g.nodes(data=True):
                out.add_node(n, **_graphml_values({k: v for k, v in d.items() if k != "embedding"}))
            for u, v, d in self._g.edges(data=True):
                key = d["type"] if d["label"] is None else f"{d['type']}:{d['label']}"
                out.add_edge(u, v, key=key, **_graphml_values(d))
        with atomic_file(path) as tmp:
            nx.write_graphml(out, tmp)
        return path

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (timestamps as ISO strings); ``from_dict`` inverts it."""
        with self._lock:
            nodes = []
            for n, d in self._g.nodes(data=True):
                attributes = {k: v for k, v in d.items() if k not in NODE_FIELDS}
                nodes.append(
                    {
                        "id": n,
                        "type": d["type"],
                        "text": d["text"],
                        "timestamp": encode_time(d["timestamp"]),
                        "provenance": list(d["provenance"]),
                        "embedding": None if d["embedding"] is None else d["embedding"].tolist(),
                        "attributes": encode_value(attributes, f"node {n!r} attributes"),
                    }
                )
            edges = []
            for u, v, d in self._g.edges(data=True):
                attributes = {k: val for k, val in d.items() if k not in EDGE_FIELDS}
                edges.append(
                    {
                        "src": u,
                        "dst": v,
                        **{k: d[k] for k in EDGE_FIELDS},
                        "attributes": encode_value(attributes, f"edge {u!r}->{v!r} attributes"),
                    }
                )
        return {"format_version": FORMAT_VERSION, "nodes": nodes, "edges": edges}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MemoryGraph":
        if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
            found = data.get("format_version") if isinstance(data, dict) else type(data).__name__
            raise GraphError(f"not a MemoryGraph dict of format version {FORMAT_VERSION} (found {found!r})")
        graph = cls()
        try:
            for n in data["nodes"]:
                graph.add_node(
                    n["id"],
                    n["type"],
                    text=n["text"],
                    timestamp=decode_time(n["timestamp"]),
                    provenance=n["provenance"],
                    embedding=None if n["embedding"] is None else np.asarray(n["embedding"], dtype=np.float32),
                    **decode_value(n["attributes"]),
                )
            for e in data["edges"]:
                graph.add_edge(
                    e["src"],
                    e["dst"],
                    e["type"],
                    label=e["label"],
                    weight=e["weight"],
                    directed=e["directed"],
                    **decode_value(e["attributes"]),
                )
        except (KeyError, TypeError) as e:
            raise GraphError(f"malformed MemoryGraph dict: {type(e).__name__}: {e}") from None
        return graph

    # -- internals -----------------------------------------------------------------------
    def _node_data(self, id: str) -> dict[str, Any]:
        try:
            return self._g.nodes[id]
        except KeyError:
            raise KeyError(f"no node {id!r} in the graph") from None

    def __repr__(self) -> str:
        return f"MemoryGraph(nodes={self.num_nodes()}, edges={self.num_edges()}, types={self.node_types()})"


def _graphml_values(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as GraphML can hold it (see ``MemoryGraph.to_graphml``)."""
    values: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        if isinstance(value, (bool, int, float, str)):
            values[key] = value
        elif isinstance(value, (datetime, date)):
            values[key] = value.isoformat()
        else:
            values[key] = json.dumps(encode_value(list(value) if isinstance(value, tuple) else value, key),
                                     ensure_ascii=False)
    return values


def _union(existing: tuple[str, ...], new: Iterable[str]) -> tuple[str, ...]:
    """Ordered union of provenance ids."""
    if isinstance(new, str):
        new = (new,)
    return tuple(dict.fromkeys((*existing, *(str(s) for s in new))))


def _copy_data(data: dict[str, Any]) -> dict[str, Any]:
    """A copy a caller may keep or change without touching the graph."""
    out = {}
    for key, value in data.items():
        if isinstance(value, np.ndarray):
            out[key] = value.copy()
        elif isinstance(value, (dict, list, set)):
            out[key] = copy.deepcopy(value)
        else:
            out[key] = value
    return out
