"""MAGMA's memory: one multigraph of event nodes with four edge spaces, and its dual-stream
evolution (MAGMA 3.2 and 3.4).

* **Event nodes** ``<content, timestamp, embedding, attributes>`` (Eq. 3): one per segment
  (a turn by default); the content is the segment's text with its relative dates resolved in
  code; the provenance is the segment's turn ids; the speaker is the turn's, or a multi-turn
  event's participants (``event_speaker``); the attributes are filled by the slow path
  (appendix C.1's extraction).
* **Edge spaces** on one ``MemoryGraph``: ``temporal`` (the immutable chain n_{t-1} -> n_t, in
  ingestion order, which is time order for a conversation), ``semantic`` (undirected, cosine
  above ``semantic_threshold``, at most ``semantic_neighbours`` per new event), ``causal``
  (directed, inferred by the slow path) and ``entity`` (event -- entity node, entities
  de-duplicated across the conversation by their case-folded name). ``edge_types`` says which
  spaces are built (the ablations of Tables 4 and 5).
* **Fast path** (Algorithm 2, ``ingest``): node (its relative dates resolved by the injected
  ``normalizer``), temporal link, embedding and index, semantic links, enqueue. No LLM call.
* **Slow path** (Algorithm 3, ``consolidate``): a background worker thread dequeues event ids
  and runs the injected stages on each, applying their results itself: the
  ``event_extractor`` (C.1) fills the node's attributes and links it to entity nodes; the
  ``consolidator`` reads its ``neighbourhood_hops`` neighbourhood and its causal links become
  edges. A step that raises is logged and counted in ``failed_steps``; the worker goes on.
  ``backlog`` is the number of events not yet consolidated; ``wait_until_consolidated``
  blocks until it is 0. Readers get consistent views through ``graph.locked()`` (the graph's
  lock).

Saving: ``save(dir)`` / ``MagmaMemory.load(dir, embedder)`` (``memlab.memory.bundle``: the
event index, the graph with its four edge spaces and entity nodes, and the evolution state,
written atomically and checked on load). Only a consolidated memory is saved: ``save``
refuses while the backlog is not empty, because a snapshot taken mid-step could hold part
of a step's edges and re-running that step after loading would duplicate them. Call
``wait_until_consolidated()`` first. The stages are not saved; pass them to ``load`` to go
on ingesting.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from datetime import datetime
from typing import Any

from memlab.embed.base import Embedder
from memlab.memory.base import Memory
from memlab.memory.bundle import load_bundle, save_bundle
from memlab.memory.graph import MemoryGraph
from memlab.memory.store import MemoryStoreError, UnitMemory
from memlab.memory.structure import mean, share
from memlab.stages.consolidate import ConsolidateIn, ConsolidateOut, Consolidator, EventRef
from memlab.stages.event import EventExtractor, EventIn, EventOut
from memlab.stages.temporal import TemporalIn, TemporalNormalizer, annotate
from memlab.types import MemoryUnit

log = logging.getLogger(__name__)

EDGE_SPACES: tuple[str, ...] = ("temporal", "causal", "semantic", "entity")
FORMAT = "memlab.MagmaMemory"
FORMAT_VERSION = 1
_STOP = object()


def event_speaker(segment: MemoryUnit) -> str | None:
    """Who speaks in ``segment``: its speaker (a turn), else its participants joined (a
    multi-turn event from an event segmenter: C.1's prompt names a speaker, never a blank)."""
    participants = segment.attributes.get("participants") or ()
    return segment.speaker or (", ".join(participants) if participants else None)


class MagmaMemory(Memory):
    """The multigraph, the event index and the consolidation worker of one conversation."""

    def __init__(
        self,
        embedder: Embedder,
        edge_types: tuple[str, ...] = EDGE_SPACES,
        semantic_threshold: float = 0.6,
        semantic_neighbours: int = 5,
        participants: tuple[str, ...] = (),
        normalizer: TemporalNormalizer | None = None,
        event_extractor: EventExtractor | None = None,
        consolidator: Consolidator | None = None,
        neighbourhood_hops: int = 2,
    ) -> None:
        unknown = set(edge_types) - set(EDGE_SPACES)
        if unknown:
            raise ValueError(f"unknown edge types {sorted(unknown)}; MAGMA has {EDGE_SPACES}")
        self.graph = MemoryGraph()
        self.index = UnitMemory(embedder)
        self.edge_types = tuple(edge_types)
        self.semantic_threshold = semantic_threshold
        self.semantic_neighbours = semantic_neighbours
        self.failed_steps = 0
        self.errors: list[str] = []
        self.normalizer = normalizer
        self.event_extractor = event_extractor
        self.consolidator = consolidator if "causal" in self.edge_types else None
        self.neighbourhood_hops = neighbourhood_hops
        #: The conversation's speakers (extracted entities are validated against them).
        self.participants = tuple(participants)
        #: Summary of the last consolidated event (C.1's {prev_summary}); the worker updates it.
        self.last_summary = ""
        self._last_event: str | None = None
        #: Ingestion position of every event (the worker reads it while the fast path adds to it).
        self._sequence: dict[str, int] = {}
        self._queue: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None

    # -- fast path (Algorithm 2) -----------------------------------------------------------
    def ingest(self, segment: MemoryUnit) -> str:
        """Add one segment as an event node; returns its id. Never calls an LLM."""
        content = segment.text
        if segment.timestamp is not None and self.normalizer is not None:
            mentions = self.normalizer.run_one(TemporalIn(content, segment.timestamp)).mentions
            content = annotate(content, mentions)
        unit = MemoryUnit(
            id=segment.id, text=content, source_ids=segment.source_ids, timestamp=segment.timestamp,
            kind="event", speaker=event_speaker(segment), attributes=dict(segment.attributes),
        )
        self.index.add([unit])
        self._sequence[unit.id] = len(self._sequence)  # before the node exists in the graph
        vector = self.index.vectors([unit.id])[0]
        similar = []
        if "semantic" in self.edge_types:
            similar = [r for r in self.index.search_dense(vector, k=self.semantic_neighbours + 1) if r.unit.id != unit.id]
        self.graph.add_node(unit.id, "event", text=content, timestamp=unit.timestamp,
                            provenance=unit.source_ids, embedding=vector, speaker=unit.speaker)
        if "temporal" in self.edge_types and self._last_event is not None:
            self.graph.add_edge(self._last_event, unit.id, "temporal", directed=True)
        for hit in similar:
            if hit.score > self.semantic_threshold:
                self.graph.add_edge(unit.id, hit.unit.id, "semantic", weight=hit.score, directed=False)
        self._last_event = unit.id
        if self.has_slow_path:
            self._ensure_worker()
            self._queue.put(unit.id)
        return unit.id

    # -- slow path (Algorithm 3) -----------------------------------------------------------
    @property
    def has_slow_path(self) -> bool:
        return self.event_extractor is not None or self.consolidator is not None

    def consolidate(self, event_id: str) -> None:
        """The slow-path step for one event: the stages' calls, then their results applied."""
        unit = self.unit(event_id)
        if self.event_extractor is not None:
            self.apply_event(event_id, self.event_extractor.run_one(EventIn(
                speaker=unit.speaker or "", text=unit.text, prev_summary=self.last_summary,
                reference=unit.timestamp, participants=self.participants,
            )))
        if self.consolidator is not None:
            neighbours = self.neighbourhood(event_id, self.neighbourhood_hops)
            if neighbours:
                refs = tuple(EventRef(n, self.unit(n).text, self.unit(n).timestamp) for n in neighbours)
                self.apply_causal_links(self.consolidator.run_one(
                    ConsolidateIn(EventRef(event_id, unit.text, unit.timestamp), refs)))

    def apply_event(self, event_id: str, out: EventOut) -> None:
        """C.1's extraction as the node's attributes, the running summary and entity links."""
        self.graph.set_attributes(event_id, **out.attributes())
        self.last_summary = out.summary or self.last_summary
        if "entity" in self.edge_types:
            for name in out.entities:
                entity_id = "entity:" + " ".join(re.findall(r"\w+", name.casefold()))
                self.graph.add_node(entity_id, "entity", text=name)
                self.graph.add_edge(event_id, entity_id, "entity", directed=False)

    def apply_causal_links(self, out: ConsolidateOut) -> None:
        for link in out.links:
            self.graph.add_edge(link.cause, link.effect, "causal", weight=link.score, directed=True)

    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="magma-consolidation", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self.consolidate(item)
            except Exception as e:  # a failed step must not kill the worker
                self.failed_steps += 1
                self.errors.append(f"{item}: {type(e).__name__}: {e}")
                log.warning("MAGMA consolidation of %s failed: %s: %s", item, type(e).__name__, e)
            finally:
                self._queue.task_done()

    @property
    def backlog(self) -> int:
        """Events enqueued and not yet consolidated."""
        return self._queue.unfinished_tasks

    def wait_until_consolidated(self, timeout: float | None = None) -> bool:
        """Block until the backlog is empty; False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.backlog:
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def close(self) -> None:
        """Finish the backlog and stop the worker."""
        if self._worker is not None and self._worker.is_alive():
            self._queue.put(_STOP)
            self._worker.join()
        self._worker = None

    # -- reading ---------------------------------------------------------------------------
    def events(self) -> list[str]:
        return self.graph.nodes("event")

    def unit(self, id: str) -> MemoryUnit:
        return self.index.get(id)

    def latest_time(self) -> datetime | None:
        times = [u.timestamp for u in self.index.units.values() if u.timestamp is not None]
        return max(times) if times else None

    def neighbourhood(self, id: str, hops: int = 2) -> list[str]:
        """Event ids within ``hops`` edges of ``id`` (any edge space, both directions), through
        events ingested before ``id`` only, nearest hop first, then most recent first.

        The slow path of an online system sees the graph as it was when the event arrived. An
        evaluation ingests a whole conversation in a burst, so how many later events the
        worker would see depends on thread timing; past-only keeps the step (and its LLM
        request, hence the response cache) the same from run to run.
        """
        order, limit = self._sequence, self._sequence[id]
        with self.graph.locked():
            seen, frontier, found = {id}, [id], []
            for _ in range(hops):
                frontier = list(dict.fromkeys(
                    v for u in frontier for v, _, _ in self.graph.neighbors(u, direction="both")
                    if v not in seen and order.get(v, -1) < limit  # entity nodes: -1
                ))
                seen.update(frontier)
                found += sorted((v for v in frontier if self.graph.node_type(v) == "event"), key=order.get, reverse=True)
            return found

    def stats(self) -> dict[str, int]:
        counts = {f"{t}_edges": len(self.graph.edges(t)) for t in EDGE_SPACES}
        return {"events": len(self.events()), "entities": len(self.graph.nodes("entity")), **counts,
                "backlog": self.backlog, "failed_steps": self.failed_steps}

    def structure(self) -> dict[str, Any]:
        """The multigraph's shape (``memlab.memory.structure``): each built edge space's size,
        the speakers the events carry (C.1's prompt names one), the graph's components. What the
        paper implies (3.2, Tables 4-5): every built space non-empty; causal links inferred by
        the slow path for some events of every session; one connected graph (the temporal chain
        alone links every event)."""
        with self.graph.locked():
            events = [self.index.get(i) for i in self.events()]
            edges = {space: len(self.graph.edges(space)) for space in EDGE_SPACES}
            components = self.graph.component_sizes("event")
        sessions = len({e.session for e in events} - {None})
        found = {
            "events": len(events),
            "mean_turns_per_event": mean(len(e.source_ids) for e in events),
            "speaker_share": share(sum(bool(e.speaker) for e in events), len(events)),
            "sessions": sessions,
            **{f"{space}_edges": count for space, count in edges.items()},
            "causal_edges_per_session": share(edges["causal"], sessions),
            "entities": self.graph.num_nodes("entity"),
            "entity_edges_per_event": share(edges["entity"], len(events)),
            "components": len(components),
        }
        problems = [f"the {space} graph is empty" for space in self.edge_types if len(events) > 1 and not edges[space]]
        if events and found["speaker_share"] < 0.5:
            problems.append(f"only {found['speaker_share']:.0%} of events carry a speaker")
        return {**found, "degenerate": problems}

    # -- saving ----------------------------------------------------------------------------
    def save(self, folder) -> None:
        """Save a consolidated memory atomically (module docstring); refuses a backlog."""
        if self.backlog:
            raise MemoryStoreError(
                f"{folder}: MAGMA memory has {self.backlog} events not yet consolidated; "
                "call wait_until_consolidated() before save()"
            )
        with self.graph.locked():
            state = {
                "edge_types": list(self.edge_types),
                "semantic_threshold": self.semantic_threshold,
                "semantic_neighbours": self.semantic_neighbours,
                "participants": list(self.participants),
                "last_summary": self.last_summary,
                "neighbourhood_hops": self.neighbourhood_hops,
                "last_event": self._last_event,
                "failed_steps": self.failed_steps,
                "errors": list(self.errors),
            }
            save_bundle(folder, format=FORMAT, format_version=FORMAT_VERSION, embedder=self.index.embedder,
                        parts={"events": self.index}, graph=self.graph, state=state)

    @classmethod
    def load(
        cls,
        folder,
        embedder: Embedder,
        normalizer: TemporalNormalizer | None = None,
        event_extractor: EventExtractor | None = None,
        consolidator: Consolidator | None = None,
    ) -> "MagmaMemory":
        """A memory saved by ``save``; the stages are those for events ingested from now on."""
        bundle = load_bundle(folder, format=FORMAT, format_version=FORMAT_VERSION, embedder=embedder)
        state = bundle.state
        try:
            memory = cls(embedder, edge_types=tuple(state["edge_types"]),
                         semantic_threshold=state["semantic_threshold"],
                         semantic_neighbours=state["semantic_neighbours"],
                         participants=tuple(state["participants"]), normalizer=normalizer,
                         event_extractor=event_extractor, consolidator=consolidator,
                         neighbourhood_hops=state.get("neighbourhood_hops", 2))
            memory.last_summary = state["last_summary"]
            memory._last_event = state["last_event"]
            memory.failed_steps = state["failed_steps"]
            memory.errors = list(state["errors"])
        except (KeyError, TypeError, ValueError) as e:
            raise MemoryStoreError(f"{folder}: state.json is not a MAGMA state: {type(e).__name__}: {e}") from None
        events = bundle.parts.get("events")
        if events is None:
            raise MemoryStoreError(f"{folder}: no 'events' part in the manifest")
        if set(bundle.graph.nodes("event")) != set(events.units):
            raise MemoryStoreError(f"{folder}: graph.json events and the event index differ")
        memory.graph, memory.index = bundle.graph, events
        memory._sequence = {event: i for i, event in enumerate(events.units)}
        return memory
