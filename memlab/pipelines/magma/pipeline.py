"""MAGMA: multi-graph agentic memory with intent-aware policy-guided traversal.

Memory (3.2, 3.4; ``magma_memory.MagmaMemory``): each segment becomes an event node on the
fast path (temporal link, embedding, semantic links); a background worker consolidates each
event on the slow path: appendix C.1's extraction fills its attributes and links it to
de-duplicated entity nodes, and an LLM reads its 2-hop neighbourhood to add causal edges.
The pipeline hands the memory its stages; the memory calls them and applies their results.

Query (3.3, Algorithm 1):
1. the ``router`` gives the intent T_q, a question type (for C.2's dynamic instruction only),
   the question's time window and keywords;
2. anchors: reciprocal-rank fusion (constant ``rrf_k``) of the dense top ``vector_top_k``, the
   BM25 ranking of the keywords (weight ``keyword_weight``, Table 6's w_keyword) and the dense
   ranking inside the time window (Eq. 4); the top ``anchor_k`` are the anchors;
3. the ``traverser`` (``TraversalPolicy``) runs the intent-weighted beam search over the
   configured ``edge_types``;
4. the visited events are ordered for the intent, scaffolded with time and reference id, and
   cut to ``context_tokens`` by salience (``magma_narrative``); the ``answerer`` (C.2) answers.

``retrieve`` returns the visited events in visit order (anchors first, then each depth's
beam by score), then the rest of the fused anchor ranking and of a dense ranking, so recall@k
is defined to ``RECALL_DEPTH``. The time window is a ranking signal, not a hard filter.
"""

from __future__ import annotations

from datetime import datetime, time

import numpy as np
import torch

from memlab.bounds import NonNegativeFloat, NonNegativeInt, PositiveInt, UnitFloat
from memlab.dates import format_day
from memlab.embed.base import Embedder
from memlab.memory.index import MetadataFilter, rrf_fuse
from memlab.pipelines.base import RECALL_DEPTH, Pipeline
from memlab.pipelines.magma.memory import EDGE_SPACES, MagmaMemory
from memlab.pipelines.magma.narrative import linearize, order_events
from memlab.stages.answer import Answerer, AnswerIn
from memlab.stages.consolidate import Consolidator
from memlab.stages.event import EventExtractor
from memlab.stages.route import IntentRouter, RouteIn, RouteOut
from memlab.stages.segment import Segmenter, SegmentIn
from memlab.stages.temporal import TemporalNormalizer
from memlab.stages.traverse import TraverseIn, TraverseOut, Traverser
from memlab.types import Answer, History, Query, Retrieved, Trace


class MAGMA(Pipeline):
    """The MAGMA pipeline (see the module docstring); every stage is a swappable slot."""

    query_settings = ("router", "traverser", "answerer", "vector_top_k", "keyword_weight", "rrf_k", "anchor_k",
                      "context_tokens")

    def __init__(
        self,
        segmenter: Segmenter,
        embedder: Embedder,
        router: IntentRouter,
        traverser: Traverser,
        answerer: Answerer,
        event_extractor: EventExtractor | None = None,
        consolidator: Consolidator | None = None,
        normalizer: TemporalNormalizer | None = None,
        edge_types: list[str] | tuple[str, ...] = EDGE_SPACES,
        semantic_threshold: UnitFloat = 0.6,
        semantic_neighbours: NonNegativeInt = 5,
        neighbourhood_hops: NonNegativeInt = 2,
        vector_top_k: PositiveInt = 20,
        keyword_weight: NonNegativeFloat = 2.0,
        rrf_k: NonNegativeInt = 60,
        anchor_k: PositiveInt = 5,
        context_tokens: PositiveInt = 1500,
        consolidate_before_answering: bool = True,
    ) -> None:
        super().__init__()
        unknown = set(edge_types) - set(EDGE_SPACES)
        if unknown:
            raise ValueError(f"edge_types: unknown {sorted(unknown)}; MAGMA has {EDGE_SPACES}")
        self.segmenter = segmenter
        self.embedder = embedder
        self.router = router
        self.traverser = traverser
        self.answerer = answerer
        self.event_extractor = event_extractor
        self.consolidator = consolidator
        self.normalizer = normalizer
        self.edge_types = tuple(edge_types)
        self.semantic_threshold = semantic_threshold
        self.semantic_neighbours = semantic_neighbours
        self.neighbourhood_hops = neighbourhood_hops
        self.vector_top_k = vector_top_k
        self.keyword_weight = keyword_weight
        self.rrf_k = rrf_k
        self.anchor_k = anchor_k
        self.context_tokens = context_tokens
        self.consolidate_before_answering = consolidate_before_answering

    # -- memory ----------------------------------------------------------------------------
    def build(self, history: History) -> MagmaMemory:
        """Ingest every turn (fast path). With ``consolidate_before_answering`` (the default,
        as in the paper's evaluation) also wait for the slow path's backlog to drain;
        otherwise return at once with the worker still consolidating, so questions are
        answered on the graph as it stands (each answer's trace records the backlog), and
        ``release`` finishes the backlog afterwards."""
        memory = MagmaMemory(
            self.embedder, self.edge_types, self.semantic_threshold, self.semantic_neighbours,
            participants=tuple(history.speakers), normalizer=self.normalizer,
            event_extractor=self.event_extractor, consolidator=self.consolidator,
            neighbourhood_hops=self.neighbourhood_hops,
        )
        try:
            for out in self.segmenter([SegmentIn(history.id, s) for s in history.sessions]):
                for segment in out.units:
                    memory.ingest(segment)
        except BaseException:
            memory.close()
            raise
        if self.consolidate_before_answering:
            memory.close()  # finishes the backlog, then stops the worker
        return memory

    def release(self, memory: MagmaMemory) -> None:
        memory.close()

    def save_memory(self, memory: MagmaMemory, folder) -> None:
        """Saved consolidated: the slow path's backlog is drained first."""
        memory.wait_until_consolidated()
        memory.save(folder)

    def load_memory(self, folder) -> MagmaMemory:
        return MagmaMemory.load(folder, self.embedder, self.normalizer, self.event_extractor, self.consolidator)

    # -- query -----------------------------------------------------------------------------
    def routes(self, memory: MagmaMemory, queries: list[Query]) -> list[RouteOut]:
        """Step 1 for a batch of queries (one router call); a query without a date is resolved
        against the latest time in memory."""
        return self.router([RouteIn(q.text, q.timestamp or memory.latest_time()) for q in queries])

    def anchors(
        self, memory: MagmaMemory, query: Query, route: RouteOut | None = None
    ) -> tuple[RouteOut, np.ndarray, list, list[Retrieved]]:
        """Steps 1-2: (route, query vector, fused RRF ranking of (id, score), dense ranking);
        ``route``: the query's route when already known."""
        route = route or self.routes(memory, [query])[0]
        query_vector = self.embedder.encode_queries([query.text])[0]
        depth = max(self.vector_top_k, RECALL_DEPTH)
        dense = memory.index.search_dense(query_vector, k=depth)
        keywords = " ".join(route.keywords) or query.text
        rankings = [[r.unit.id for r in dense[: self.vector_top_k]],
                    [r.unit.id for r in memory.index.search_bm25(keywords, k=self.vector_top_k)]]
        weights = [1.0, self.keyword_weight]
        if route.time_window is not None:
            window = MetadataFilter(start=datetime.combine(route.time_window[0], time.min),
                                    end=datetime.combine(route.time_window[1], time.max))
            rankings.append([r.unit.id for r in memory.index.search_dense(query_vector, self.vector_top_k, window)])
            weights.append(1.0)
        return route, query_vector, rrf_fuse(rankings, k=self.rrf_k, weights=weights), dense

    def search(self, memory: MagmaMemory, queries: list[Query]) -> list[tuple[RouteOut, TraverseOut, list[Retrieved]]]:
        """Steps 1-3 for a batch: (route, traversal, ranking) per query; one router call and one
        traverser call for the batch."""
        anchored = [self.anchors(memory, q, route) for q, route in zip(queries, self.routes(memory, queries))]
        with torch.no_grad():
            walks = self.traverser([
                TraverseIn(memory.graph, vector, route.intent, tuple(fused[: self.anchor_k]), self.edge_types)
                for route, vector, fused, _ in anchored
            ])
        results = []
        for (route, _, fused, dense), walk in zip(anchored, walks):
            ranking: dict[str, float] = {}
            for node, score, _ in walk.visited:
                if memory.graph.node_type(node) == "event":
                    ranking.setdefault(node, score)
            for node, score in fused:
                ranking.setdefault(node, score)
            for hit in dense:
                ranking.setdefault(hit.unit.id, hit.score)
            results.append((route, walk, [Retrieved(memory.unit(n), s) for n, s in ranking.items()]))
        return results

    def retrieve_many(self, memory: MagmaMemory, queries: list[Query]) -> list[list[Retrieved]]:
        return [ranking for _, _, ranking in self.search(memory, queries)]

    def retrieve(self, memory: MagmaMemory, query: Query) -> list[Retrieved]:
        return self.retrieve_many(memory, [query])[0]

    def answer_many(self, memory: MagmaMemory, queries: list[Query]) -> list[Answer]:
        prepared = [self.narrative(memory, query, *found) for query, found in zip(queries, self.search(memory, queries))]
        outputs = self.answerer([item for item, _, _, _ in prepared])
        answers = []
        for (item, context, ranking, trace), out in zip(prepared, outputs):
            trace.add("answer", text=out.text, error=out.error)
            answers.append(Answer(text=out.text, retrieved=ranking, context=context, error=out.error, trace=trace))
        return answers

    def answer(self, memory: MagmaMemory, query: Query) -> Answer:
        return self.answer_many(memory, [query])[0]

    def narrative(
        self, memory: MagmaMemory, query: Query, route: RouteOut, walk: TraverseOut, ranking: list[Retrieved]
    ) -> tuple[AnswerIn, str, list[Retrieved], Trace]:
        """Step 4: the answerer's input (the linearised narrative), its context, the ranking and the trace so far."""
        trace = Trace()
        trace.add("route", intent=route.intent, question_type=route.question_type,
                  time_window=[d.isoformat() for d in route.time_window] if route.time_window else None,
                  keywords=list(route.keywords), error=route.error)
        depth_of = {node: depth for node, _, depth in walk.visited}
        events = [n for n, _, _ in walk.visited if memory.graph.node_type(n) == "event"]
        trace.add("traverse", anchors=[n for n in events if depth_of[n] == 0], visited=events, backlog=memory.backlog)
        # Salience: anchors first (in anchor order), then the Eq. 5 score of the step that reached a node.
        anchors = [n for n in events if depth_of[n] == 0]
        salience = {n: walk.transition.get(n, 0.0) for n in events}
        top = max(salience.values(), default=0.0) + len(anchors) + 1
        salience.update({n: top - i for i, n in enumerate(anchors)})
        ordered = order_events(memory.graph, events, route.intent)
        context, kept = linearize(memory.graph, ordered, salience, self.context_tokens, self.embedder.count_tokens)
        trace.add("linearize", order=ordered, kept=kept)
        constraints = ""
        if route.time_window is not None:
            start, end = route.time_window
            constraints = f"the question concerns {format_day(start)} to {format_day(end)}"
        item = AnswerIn(query.text, context, query.timestamp, question_type=route.question_type, constraints=constraints)
        return item, context, ranking, trace
