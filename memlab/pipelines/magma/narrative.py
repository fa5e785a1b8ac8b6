"""MAGMA's narrative synthesis by graph linearisation (3.3 stage 4, Eq. 7).

1. **Ordering**: WHEN questions by timestamp; WHY questions by a topological sort of the
   causal edges among the retrieved events (causes before effects; ties and events outside
   any causal chain by time). Other intents: by time (the paper names only these two).
2. **Scaffolding**: each event is a block ``<t: 7 May 2023> content <ref: id>``.
3. **Salience budgeting**: events are kept by salience, highest first, until
   ``token_budget`` is spent; each run of consecutive dropped events becomes one
   ``...N intermediate events...`` line.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import networkx as nx

from memlab.dates import format_day
from memlab.memory.graph import MemoryGraph


def order_events(graph: MemoryGraph, events: list[str], intent: str) -> list[str]:
    """The events in narrative order for ``intent`` (see the module docstring)."""
    with graph.locked():
        times = {e: graph.node(e)["timestamp"] for e in events}

        def by_time(e: str) -> tuple[datetime, int]:
            return (times[e] or datetime.max, events.index(e))

        if intent != "WHY":
            return sorted(events, key=by_time)
        chosen = set(events)
        dag = nx.DiGraph()
        dag.add_nodes_from(events)
        for u, v, data in graph.edges("causal"):
            if u in chosen and v in chosen and data["directed"]:
                dag.add_edge(u, v)
    try:
        return list(nx.lexicographical_topological_sort(dag, key=by_time))
    except nx.NetworkXUnfeasible:  # a causal cycle: fall back on time order
        return sorted(events, key=by_time)


def render_block(graph: MemoryGraph, event: str) -> str:
    node = graph.node(event)
    when = format_day(node["timestamp"]) if node["timestamp"] else "unknown"
    return f"<t: {when}> {node['text']} <ref: {event}>"


def linearize(
    graph: MemoryGraph,
    ordered: list[str],
    salience: dict[str, float],
    token_budget: int,
    count_tokens: Callable[[str], int],
) -> tuple[str, list[str]]:
    """The context text and the events given in full, for ``ordered`` events."""
    blocks = {e: render_block(graph, e) for e in ordered}
    kept: set[str] = set()
    spent = 0
    for event in sorted(ordered, key=lambda e: -salience.get(e, 0.0)):
        cost = count_tokens(blocks[event])
        if spent + cost > token_budget:
            continue
        kept.add(event)
        spent += cost
    lines: list[str] = []
    dropped = 0
    for event in ordered:
        if event in kept:
            if dropped:
                lines.append(f"...{dropped} intermediate events...")
                dropped = 0
            lines.append(blocks[event])
        else:
            dropped += 1
    if dropped:
        lines.append(f"...{dropped} intermediate events...")
    return "\n".join(lines), [e for e in ordered if e in kept]
