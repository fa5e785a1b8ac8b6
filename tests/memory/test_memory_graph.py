from __future__ import annotations

import json
import sys
import threading
from datetime import datetime

import numpy as np
import pytest

from memlab.memory import GraphError, MemoryGraph


def small_graph() -> MemoryGraph:
    g = MemoryGraph()
    g.add_node("e1", "event", "Caroline joins a support group", datetime(2023, 5, 7), provenance=["D1:1"])
    g.add_node("e2", "event", "Caroline researches adoption", datetime(2023, 5, 25), provenance=["D2:1", "D2:3"])
    g.add_node("e3", "event", "Caroline becomes a counselor", datetime(2023, 6, 9), provenance=["D3:1"])
    g.add_node("caroline", "entity", "Caroline", role="speaker")
    g.add_edge("e1", "e2", "temporal")
    g.add_edge("e2", "e3", "temporal")
    g.add_edge("e1", "e3", "causal", label="motivates", weight=0.8)
    g.add_edge("e1", "e2", "semantic", weight=0.6, directed=False)
    for e in ("e1", "e2", "e3"):
        g.add_edge(e, "caroline", "entity")
    return g


def ids(neighbors):
    return sorted((n, t) for n, t, _ in neighbors)


def test_typed_nodes_edges_and_counts():
    g = small_graph()
    assert g.num_nodes() == len(g) == 4 and g.num_nodes("event") == 3
    assert g.num_edges() == 7 and g.num_edges("temporal") == 2 and g.num_edges("semantic") == 1
    assert g.nodes("entity") == ["caroline"] and g.nodes() == ["e1", "e2", "e3", "caroline"]
    assert g.node_types() == ["event", "entity"]
    assert set(g.edge_types()) == {"temporal", "causal", "semantic", "entity"}
    node = g.node("e2")
    assert node["type"] == "event" and node["timestamp"] == datetime(2023, 5, 25)
    assert node["provenance"] == ("D2:1", "D2:3") and g.provenance("e2") == ("D2:1", "D2:3")
    assert g.node("caroline")["role"] == "speaker"
    assert g.has_node("e1") and "e9" not in g
    causal = [d for _, _, d in g.edges("causal")]
    assert causal[0]["label"] == "motivates" and causal[0]["weight"] == 0.8 and causal[0]["directed"]


def test_neighbors_by_type_and_direction():
    g = small_graph()
    assert ids(g.neighbors("e1", "temporal")) == [("e2", "temporal")]
    assert ids(g.neighbors("e2", "temporal", direction="in")) == [("e1", "temporal")]
    assert ids(g.neighbors("e2", "temporal", direction="both")) == [("e1", "temporal"), ("e3", "temporal")]
    # Directed causal edges are followed forward only; undirected semantic ones both ways.
    assert g.neighbors("e3", "causal") == []
    assert ids(g.neighbors("e2", "semantic")) == [("e1", "semantic")]
    assert ids(g.neighbors("e1", "semantic")) == [("e2", "semantic")]
    assert ids(g.neighbors("e1", ["causal", "semantic"])) == [("e2", "semantic"), ("e3", "causal")]
    assert ids(g.neighbors("caroline", "entity", direction="in")) == [("e1", "entity"), ("e2", "entity"), ("e3", "entity")]
    _, _, data = g.neighbors("e1", "causal")[0]
    assert data["src"] == "e1" and data["dst"] == "e3"
    with pytest.raises(KeyError, match="e9"):
        g.neighbors("e9")
    with pytest.raises(GraphError, match="direction"):
        g.neighbors("e1", direction="sideways")


def test_updates_merge_and_errors_are_clear():
    g = small_graph()
    g.add_node("e1", "event", provenance=["D1:2", "D1:1"], mood="happy")
    assert g.provenance("e1") == ("D1:1", "D1:2")
    assert g.node("e1")["text"] == "Caroline joins a support group" and g.node("e1")["mood"] == "happy"
    # Same (type, label) again updates the edge; the undirected edge is found either way round.
    g.add_edge("e2", "e1", "semantic", weight=0.9, directed=False)
    assert g.num_edges("semantic") == 1 and g.edges("semantic")[0][2]["weight"] == 0.9
    g.add_edge("e1", "e3", "causal", label="enables")
    assert g.num_edges("causal") == 2
    with pytest.raises(GraphError, match="type 'event'"):
        g.add_node("e1", "entity")
    with pytest.raises(GraphError, match="no node 'ghost'"):
        g.add_edge("e1", "ghost", "temporal")
    g.remove_edge("e2", "e1", "semantic")
    assert g.num_edges("semantic") == 0
    g.remove_node("caroline")
    assert g.num_edges("entity") == 0
    # Returned data are copies: changing them does not change the graph.
    g.node("e1")["provenance"] = ()
    g.edges("temporal")[0][2]["weight"] = 99
    assert g.provenance("e1") and g.edges("temporal")[0][2]["weight"] == 1.0


@pytest.mark.slow  # the first torch_geometric import takes ~5 s
def test_to_pyg_shapes_edge_types_and_id_order():
    g = small_graph()
    vectors = {n: np.full(4, i, dtype=np.float32) for i, n in enumerate(["e1", "e2", "e3"])}
    data = g.to_pyg(embeddings=vectors)
    assert set(data.node_types) == {"event", "entity"}
    assert set(data.edge_types) == {
        ("event", "temporal", "event"),
        ("event", "causal", "event"),
        ("event", "semantic", "event"),
        ("event", "entity", "entity"),
    }
    assert data["event"].node_ids == ["e1", "e2", "e3"] and data["event"].num_nodes == 3
    assert tuple(data["event"].x.shape) == (3, 4) and data["event"].x[2, 0] == 2
    assert "x" not in data["entity"]
    assert data["event", "temporal", "event"].edge_index.tolist() == [[0, 1], [1, 2]]
    # The undirected semantic edge appears both ways.
    assert sorted(map(tuple, data["event", "semantic", "event"].edge_index.t().tolist())) == [(0, 1), (1, 0)]
    assert data["event", "causal", "event"].edge_weight.tolist() == pytest.approx([0.8])
    assert data["event", "entity", "entity"].edge_index.tolist() == [[0, 1, 2], [0, 0, 0]]
    with pytest.raises(GraphError, match="1 of 3 'event' nodes have no embedding"):
        g.to_pyg(embeddings={"e1": vectors["e1"], "e2": vectors["e2"]})


@pytest.mark.slow
def test_to_pyg_uses_node_embeddings():
    g = MemoryGraph()
    g.add_node("a", "unit", embedding=np.ones(3))
    g.add_node("b", "unit", embedding=np.zeros(3))
    g.add_edge("a", "b", "next")
    data = g.to_pyg()
    assert data["unit"].x.tolist() == [[1, 1, 1], [0, 0, 0]]


def test_to_dict_round_trip_through_json():
    g = small_graph()
    g.add_node("e1", "event", embedding=np.arange(3), first_seen=datetime(2023, 1, 2, 3, 4), tags=["a", "b"])
    text = json.dumps(g.to_dict())
    back = MemoryGraph.from_dict(json.loads(text))
    assert back.nodes() == g.nodes()
    for n in g.nodes():
        a, b = g.node(n), back.node(n)
        ea, eb = a.pop("embedding"), b.pop("embedding")
        assert a == b
        assert (ea is None and eb is None) or np.array_equal(ea, eb)
    assert back.node("e1")["first_seen"] == datetime(2023, 1, 2, 3, 4)
    assert [(u, v, d) for u, v, d in back.edges()] == g.edges()
    with pytest.raises(GraphError, match="format version"):
        MemoryGraph.from_dict({"nodes": []})


def test_snapshot_is_independent():
    g = small_graph()
    snap = g.snapshot()
    g.add_node("e4", "event")
    g.add_edge("e3", "e4", "temporal")
    assert snap.num_nodes() == 4 and snap.num_edges("temporal") == 2


def test_reader_never_sees_a_half_added_edge_while_a_thread_writes():
    g = MemoryGraph()
    g.add_node("hub", "event")
    n = 1500
    errors: list[BaseException] = []
    done = threading.Event()

    def write():
        try:
            for i in range(n):
                g.add_node(f"n{i}", "event", provenance=[f"D{i}"])
                g.add_edge("hub", f"n{i}", "semantic", weight=i, directed=i % 2 == 0, step=i)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
        finally:
            done.set()

    def read():
        try:
            last = 0
            while not done.is_set() or last < n:
                found = g.neighbors("hub", "semantic", direction="both")
                assert len(found) >= last  # edges only ever get added
                last = len(found)
                for nbr, edge_type, data in found:
                    # Every edge a reader sees is complete: all fields present and consistent.
                    assert edge_type == "semantic" and data["weight"] == data["step"] == int(nbr[1:])
                    assert g.provenance(nbr) == (f"D{nbr[1:]}",)
                with g.locked():
                    assert g.num_edges() == len(g.edges())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=write), threading.Thread(target=read), threading.Thread(target=read)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so interleavings actually happen
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[0]
    assert g.num_edges() == n
