"""CompassMem: event-centric memory as a logic map, searched by planner-guided explorers.

Construction (section 4.2; ``build``): each session is one construction step (X_t of Eq. 1).

1. The ``segmenter`` cuts every session into events (Eq. 4) and the ``relation_extractor``
   links each session's events (Eq. 5). Both depend on the session alone, so all sessions go
   to each stage as one batch (concurrent requests on a served model).
2. Session by session, in order: every new event is compared with its most similar event e*
   already in memory (from earlier steps; with ``fusion_neighbours`` > 1 also its next most
   similar ones) and the ``fuser`` decides each pair (one batch per step): same event -> merged
   into e*; overlap -> a new node linked to the existing one by the suggested relation;
   otherwise a new node. ``merge_threshold`` (B.2: 0.9) bounds the merge case only: a "same
   event" below it, or with a neighbour other than e*, is an overlap (linked, ``related`` when
   no relation is given). This is the only path across sessions (Eq. 5 relates a session's own
   events). The session's relations become edges (a merged event's relations attach to the
   node it merged into). Then the topic layer takes the step (``compassmem_topics``).

Search (4.3; ``compassmem_search.explore``): planner, localisation, explorers on a shared
priority queue, one refinement round; the ``answerer`` (F.2 "Response Generation") answers
from the kept events only, each shown with its session date.

``retrieve`` ranks the kept events first (in the order kept), then the initial top-k, then
the dense ranking of the question, so recall@k is defined to ``RECALL_DEPTH``.

Settings are grouped by phase (``compassmem.settings``): ``construction`` and ``search``.
Ablations (Figure 4) are settings: ``construction.use_topics: false`` (no topic layer or cluster
selection), a ``TokenChunkSegmenter`` of ~100 tokens as segmenter (chunks instead of events),
``construction.edges: false`` (no relation edges; the relation extractor is not called),
``search.refinement_rounds: 0``, and ``planner: null`` (the question is the one subgoal). Figure
6's k and p are ``search.top_k`` and ``search.topic_clusters``.
"""

from __future__ import annotations

from memlab.embed.base import Embedder
from memlab.pipelines.base import RECALL_DEPTH, Pipeline, dated_text
from memlab.pipelines.compassmem.memory import EventMemory, event_view
from memlab.pipelines.compassmem.search import Search, explore, table4_statistics
from memlab.pipelines.compassmem.settings import ConstructionSettings, SearchSettings
from memlab.pipelines.compassmem.topics import TopicLayer
from memlab.stages.answer import Answerer, AnswerIn
from memlab.stages.fuse import EventFuser, FuseIn, FuseOut
from memlab.stages.navigate import Navigator
from memlab.stages.refine import QueryRefiner
from memlab.stages.relate import RelateIn, RelateOut, RelationExtractor
from memlab.stages.segment import Segmenter, SegmentIn
from memlab.stages.select import NodeSelector
from memlab.stages.subgoal import SubgoalPlanner
from memlab.types import Answer, History, MemoryUnit, Query, Retrieved, Session


def relate_input(session: Session, units: list[MemoryUnit]) -> RelateIn:
    """What the relation extractor is asked of one session (Eq. 5): its events as ``N0``, ``N1``
    ... (``event_view``), its turns and its date."""
    return RelateIn(tuple(event_view(f"N{i}", u) for i, u in enumerate(units)), session.turns, session.timestamp)


def fusion_outcome(out: FuseOut, may_merge: bool) -> str | None:
    """What a fuser's reply does to a pair: ``"merge"`` (a same event where merging is allowed),
    a relation label (an overlap, or a same event that may not merge: ``related`` when the
    reply names no relation), or None (a node of its own)."""
    if out.same_event and may_merge:
        return "merge"
    if out.same_event or out.decision == "link":
        return out.relation or "related"
    return None


class CompassMem(Pipeline):
    """The CompassMem pipeline (module docstring); every stage is a swappable slot."""

    query_settings = ("navigator", "answerer", "planner", "refiner", "selector", "cluster_selector", "search")

    def __init__(
        self,
        embedder: Embedder,
        segmenter: Segmenter,
        navigator: Navigator,
        answerer: Answerer,
        relation_extractor: RelationExtractor | None = None,
        fuser: EventFuser | None = None,
        planner: SubgoalPlanner | None = None,
        refiner: QueryRefiner | None = None,
        selector: NodeSelector | None = None,
        cluster_selector: NodeSelector | None = None,
        construction: ConstructionSettings = ConstructionSettings(),
        search: SearchSettings = SearchSettings(),
    ) -> None:
        super().__init__()
        if construction.edges and relation_extractor is None:
            raise ValueError("CompassMem: construction.edges=true needs a relation_extractor "
                             "(or set construction.edges: false)")
        if search.refinement_rounds and refiner is None:
            raise ValueError("CompassMem: search.refinement_rounds > 0 needs a refiner "
                             "(or set search.refinement_rounds: 0)")
        self.embedder = embedder
        self.segmenter = segmenter
        self.relation_extractor = relation_extractor if construction.edges else None
        self.fuser = fuser
        self.planner = planner
        self.refiner = refiner
        self.selector = selector
        self.cluster_selector = cluster_selector
        self.navigator = navigator
        self.answerer = answerer
        self.construction = construction
        self.search_settings = search

    # -- construction --------------------------------------------------------------------
    def load_memory(self, folder):
        return EventMemory.load(folder, self.embedder)

    def build(self, history: History) -> EventMemory:
        built = self.construction
        topics = TopicLayer(built.topic_threshold, built.recluster_every, built.seed) if built.use_topics else None
        memory = EventMemory(self.embedder, topics)
        sessions = [s for s in history.sessions if s.turns]
        segmented = self.segmenter([SegmentIn(history.id, s) for s in sessions]) if sessions else []
        relations = self.relate([(s, out.units) for s, out in zip(sessions, segmented)])
        for out, related in zip(segmented, relations):
            self.integrate(memory, list(out.units), related)
        return memory

    def relate(self, sessions: list) -> list[RelateOut]:
        """Eq. 5 for every session (one batch); no relations when edges are ablated."""
        if self.relation_extractor is None:
            return [RelateOut() for _ in sessions]
        return self.relation_extractor([relate_input(session, units) for session, units in sessions])

    def integrate(self, memory: EventMemory, units: list[MemoryUnit], related: RelateOut) -> None:
        """One construction step: fusion of the session's events, its relations, the topics."""
        fused = self.fusion_decisions(memory, units)
        node_of: list[str] = []
        new_ids: list[str] = []
        for unit, decisions in zip(units, fused):
            merged_into = next((existing for existing, decision in decisions if decision == "merge"), None)
            if merged_into is not None:
                memory.merge(merged_into, unit)
                node_of.append(merged_into)
                continue
            node_of.append(memory.add_event(unit))
            new_ids.append(unit.id)
            for existing, decision in decisions if self.construction.edges else ():
                if decision is not None:
                    memory.link(existing, unit.id, decision)
        for relation in related.relations if self.construction.edges else ():
            memory.link(node_of[relation.source], node_of[relation.target], relation.label, relation.cited_turns)
        memory.update_topics(new_ids)

    def fusion_decisions(self, memory: EventMemory, units: list[MemoryUnit]) -> list[list[tuple[str, str | None]]]:
        """Per new event, ``(existing event, decision)`` for e* and its next ``fusion_neighbours - 1``
        most similar earlier events, all asked in one fuser batch. A decision is ``"merge"`` (e*
        only, at or above ``merge_threshold``), a relation label (an edge existing -> new) or
        None (no link)."""
        if not units or not len(memory.index) or self.fuser is None:
            return [[] for _ in units]
        vectors = self.embedder.encode([u.text for u in units])
        asked: list[tuple[int, str, bool, FuseIn]] = []
        for i, (unit, vector) in enumerate(zip(units, vectors)):
            for rank, hit in enumerate(memory.index.search_dense(vector, k=self.construction.fusion_neighbours)):
                may_merge = rank == 0 and hit.score >= self.construction.merge_threshold
                asked.append((i, hit.unit.id, may_merge, FuseIn(event_view("NEW", unit), memory.view(hit.unit.id),
                                                                 hit.score)))
        decisions: list[list[tuple[str, str | None]]] = [[] for _ in units]
        for (i, existing, may_merge, _), out in zip(asked, self.fuser([item for *_, item in asked]) if asked else []):
            decisions[i].append((existing, fusion_outcome(out, may_merge)))
        return decisions

    # -- search --------------------------------------------------------------------------
    def search_statistics(self, traces: list[list[dict]]) -> dict:
        """Appendix Table 4 over the answered questions (``table4_statistics``), from each
        trace's ``search`` step."""
        return table4_statistics([{k: v for k, v in step.items() if k != "step"}
                                  for steps in traces for step in steps if step.get("step") == "search"])

    def search(self, memory: EventMemory, query: Query) -> tuple[Search, list[Retrieved]]:
        search = explore(self, memory, query)
        order = list(search.kept) + [i for i in search.initial if i not in search.kept]
        dense = memory.index.search_dense(query.text, k=max(RECALL_DEPTH, len(order)))
        score = {hit.unit.id: hit.score for hit in dense}
        ranking = [Retrieved(memory.unit(i), score.get(i, 0.0)) for i in order]
        ranking += [hit for hit in dense if hit.unit.id not in set(order)]
        search.trace.add("search", **search.stats())
        return search, ranking

    def retrieve(self, memory: EventMemory, query: Query) -> list[Retrieved]:
        return self.search(memory, query)[1]

    def answer(self, memory: EventMemory, query: Query) -> Answer:
        search, ranking = self.search(memory, query)
        evidence = list(search.kept) or search.initial  # 4.3.3: no evidence -> the initial top-k
        context = "\n".join(dated_text(memory.unit(i)) for i in evidence)
        out = self.answerer([AnswerIn(query.text, context, query.timestamp)])[0]
        search.trace.add("answer", evidence=[memory.key_of[i] for i in evidence], text=out.text, error=out.error)
        return Answer(text=out.text, retrieved=ranking, context=context, error=out.error, trace=search.trace)
