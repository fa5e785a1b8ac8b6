"""CompassMem's memory: the event graph, its dense index and its topic layer (section 4.2).

* **Event nodes** (type ``event``): an event's summary, session date, participants and
  provenance (the turns it was made from, so evidence recall@k works as for every pipeline).
  Each has a short key (``N0``, ``N1`` ... in insertion order) that prompts show instead of
  the node id.
* **Relation edges** (type ``relation``, directed ``source -> target``, ``label`` one of
  ``RELATION_LABELS``, ``cited_turns`` the turns the extractor cited): from the relation extractor within a
  session, and from fusion's "relation edge" decision across sessions.
* **Merging** (fusion's "same event"): the new event's summary is appended to the existing
  node's, its turns and people are added, and the node is re-embedded.
* **Topics** (``TopicLayer``, optional): which topic each event belongs to.

``EventMemory`` holds state only; the pipeline decides what to add (``CompassMem.build``).
``save`` / ``load`` go through the bundle store (``memlab.memory.bundle``: atomic, versioned,
checked on load): the event index, the graph, the keys and the topic layer's state.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from memlab.embed.base import Embedder
from memlab.memory.base import Memory
from memlab.memory.bundle import load_bundle, save_bundle
from memlab.memory.graph import MemoryGraph
from memlab.memory.store import MemoryStoreError, UnitMemory
from memlab.memory.structure import cross_session_share, share, span_structure
from memlab.pipelines.compassmem.topics import TopicLayer
from memlab.stages.event_view import EventView
from memlab.stages.navigate import Neighbour
from memlab.types import MemoryUnit

EVENT = "event"
RELATION = "relation"
FORMAT = "memlab.CompassMemMemory"
FORMAT_VERSION = 1


class EventMemory(Memory):
    """The event graph + index + topics of one conversation (module docstring)."""

    def __init__(self, embedder: Embedder, topics: TopicLayer | None = None) -> None:
        self.graph = MemoryGraph()
        self.index = UnitMemory(embedder, self.graph)
        self.topics = topics
        self.key_of: dict[str, str] = {}
        self.id_of: dict[str, str] = {}
        self.merges = 0

    # -- growing -------------------------------------------------------------------------
    def add_event(self, unit: MemoryUnit) -> str:
        """A new event node for ``unit`` (any segmenter's unit is an event); returns its id."""
        key = f"N{len(self.key_of)}"
        self.key_of[unit.id] = key
        self.id_of[key] = unit.id
        event = unit if unit.kind == EVENT else MemoryUnit(unit.id, unit.text, unit.source_ids, unit.timestamp, EVENT,
                                                           unit.speaker, dict(unit.attributes))
        self.index.add([event])
        self.graph.add_node(unit.id, EVENT, text=unit.text, timestamp=unit.timestamp, provenance=unit.source_ids,
                            participants=list(participants(unit)))
        return unit.id

    def merge(self, existing_id: str, unit: MemoryUnit) -> None:
        """Fold ``unit`` into the existing event (fusion's "same event" case)."""
        old = self.index.get(existing_id)
        people = tuple(dict.fromkeys(participants(old) + participants(unit)))
        merged = MemoryUnit(old.id, f"{old.text} {unit.text}", tuple(dict.fromkeys(old.source_ids + unit.source_ids)),
                            old.timestamp, EVENT, old.speaker, {**old.attributes, "participants": list(people)})
        self.index.add([merged])  # same id: replaced in place and re-embedded
        self.graph.add_node(existing_id, EVENT, text=merged.text, provenance=merged.source_ids,
                            participants=list(people))
        self.merges += 1

    def link(self, source_id: str, target_id: str, label: str, cited_turns: tuple[str, ...] = ()) -> None:
        if source_id != target_id:
            self.graph.add_edge(source_id, target_id, RELATION, label=label, cited_turns=list(cited_turns))

    def update_topics(self, new_ids: list[str]) -> None:
        """One construction step of the topic layer (no-op without one)."""
        if self.topics is None:
            return
        ids = self.events()
        vectors = self.index.vectors(ids) if ids else np.zeros((0, 0), dtype=np.float32)
        new = [i for i in new_ids if i in self.index]
        self.topics.step(new, self.index.vectors(new) if new else vectors[:0], ids, vectors)

    # -- reading -------------------------------------------------------------------------
    def events(self) -> list[str]:
        return list(self.index.units)

    def unit(self, event_id: str) -> MemoryUnit:
        return self.index.get(event_id)

    def view(self, event_id: str) -> EventView:
        return event_view(self.key_of[event_id], self.index.get(event_id))

    def neighbours(self, event_id: str) -> list[Neighbour]:
        """Typed neighbours as the explorer sees them: ``label`` for an edge leaving the node,
        ``label (from)`` for one entering it."""
        found: dict[str, Neighbour] = {}
        for other, _, data in self.graph.neighbors(event_id, RELATION, direction="both"):
            relation = data["label"] if data["src"] == event_id else f"{data['label']} (from)"
            found.setdefault(other, Neighbour(self.view(other), relation))
        return list(found.values())

    def topic_of(self, event_id: str) -> int | None:
        return None if self.topics is None else self.topics.topic_of.get(event_id)

    def stats(self) -> dict[str, int]:
        return {"events": len(self.index), "relations": self.graph.num_edges(RELATION), "merged_events": self.merges,
                "topics": 0 if self.topics is None else self.topics.n_topics,
                "reclusterings": 0 if self.topics is None else self.topics.reclusterings}

    def structure(self) -> dict[str, Any]:
        """The event graph's shape (``memlab.memory.structure``). What the paper's graph implies:
        multi-turn events (its 100-token chunk ablation is sized to the mean event), relation
        edges within sessions (Eq. 5) and across them (fusion's "relation" case, 4.2), so that
        EXPAND can reach another session; topics that group several events."""
        events = [self.index.get(i) for i in self.events()]
        edges = [(u, v) for u, v, _ in self.graph.edges(RELATION)]
        crossing, crossing_share = cross_session_share(edges, {e.id: e.session for e in events})
        topic_sizes = Counter(self.topics.topic_of.values()) if self.topics is not None else Counter()
        components = self.graph.component_sizes(EVENT, [RELATION])
        found = {
            **span_structure(events, "event"),
            "relation_edges": len(edges),
            "relation_edges_per_event": share(len(edges), len(events)),
            "cross_session_edges": crossing,
            "cross_session_edge_share": crossing_share,
            "merged_events": self.merges,
            "topics": len(topic_sizes),
            "singleton_topic_share": share(sum(size == 1 for size in topic_sizes.values()), len(topic_sizes)),
            "largest_component_share": share(components[0], len(events)) if components else None,
        }
        problems = []
        if len(events) > 1 and not edges:
            problems.append("no relation edge")
        elif found["sessions"] > 1 and not crossing:
            problems.append("no relation edge crosses sessions")
        elif found["sessions"] > 1 and crossing_share < 0.05:  # the audit's conv-26: 1 edge of 88
            problems.append(f"only {crossing} of {len(edges)} relation edges cross sessions")
        if (found["single_turn_event_share"] or 0) >= 0.8:
            problems.append(f"{found['single_turn_event_share']:.0%} of events are single turns")
        if (found["cited_provenance_share"] if events else 1) < 0.5:
            problems.append(f"only {found['cited_provenance_share']:.0%} of events cite their turns")
        if len(topic_sizes) > 1 and found["singleton_topic_share"] >= 0.8:
            problems.append(f"{found['singleton_topic_share']:.0%} of topics hold one event")
        return {**found, "degenerate": problems}

    # -- saving --------------------------------------------------------------------------
    def save(self, folder) -> None:
        topics = None if self.topics is None else {
            "threshold": self.topics.threshold, "recluster_every": self.topics.recluster_every,
            "seed": self.topics.seed, "topic_of": dict(self.topics.topic_of),
            "centroids": self.topics.centroids.tolist(), "steps": self.topics.steps,
            "reclusterings": self.topics.reclusterings}
        save_bundle(folder, format=FORMAT, format_version=FORMAT_VERSION, embedder=self.index.embedder,
                    parts={"events": self.index}, graph=self.graph,
                    state={"key_of": self.key_of, "merges": self.merges, "topics": topics})

    @classmethod
    def load(cls, folder, embedder: Embedder) -> "EventMemory":
        bundle = load_bundle(folder, format=FORMAT, format_version=FORMAT_VERSION, embedder=embedder)
        try:
            state, topics = bundle.state, bundle.state["topics"]
            layer = None
            if topics is not None:
                layer = TopicLayer(float(topics["threshold"]), int(topics["recluster_every"]), int(topics["seed"]))
                layer.topic_of = {str(k): int(v) for k, v in topics["topic_of"].items()}
                layer.centroids = np.asarray(topics["centroids"], dtype=np.float32)
                layer.steps, layer.reclusterings = int(topics["steps"]), int(topics["reclusterings"])
            memory = cls(embedder, layer)
            memory.index = bundle.parts["events"]
            memory.graph = memory.index.graph = bundle.graph  # one graph, as when it was built
            memory.key_of = {str(k): str(v) for k, v in state["key_of"].items()}
            memory.merges = int(state["merges"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise MemoryStoreError(f"{folder}: not a CompassMem memory: {type(e).__name__}: {e}") from None
        memory.id_of = {key: node for node, key in memory.key_of.items()}
        if set(memory.key_of) != set(memory.index.units) or set(bundle.graph.nodes(EVENT)) != set(memory.index.units):
            raise MemoryStoreError(f"{folder}: not a CompassMem memory: its event keys, index and graph differ")
        return memory


def event_view(key: str, unit: MemoryUnit) -> EventView:
    """What the stages see of an event unit, under the prompt key ``key``."""
    return EventView(key, unit.text, unit.source_ids, participants(unit), unit.timestamp)


def participants(unit: MemoryUnit) -> tuple[str, ...]:
    """An event's people: the segmenter's ``participants``, else the unit's speaker(s)."""
    people = unit.attributes.get("participants") or unit.attributes.get("speakers") or ([unit.speaker] if unit.speaker else [])
    return tuple(str(p) for p in people)
