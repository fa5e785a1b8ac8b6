"""SimpleMem (semantic compression + online synthesis + intent-aware retrieval planning).

Writing, per session (paper sections 2.1-2.2):
  1. the session's turns are cut into overlapping windows (``window`` turns every ``stride``
     turns; windows never span two sessions, so each has one start time);
  2. ``compressor`` turns each window into memory units (an empty list gates it out);
     units with identical text from overlapping windows become one, with the union of
     their provenance;
  3. ``synthesizer`` (optional) merges related units into consolidated entries and adds
     abstract representations beside them;
  4. the session's entries are committed to a ``UnitMemory``: the semantic view (dense
     embeddings), the lexical view (BM25) and the symbolic view (``timestamp`` and
     ``attributes`` entities / topic / salience, searched through ``MetadataFilter``).

Reading (section 2.3): ``planner`` turns the query into a plan; three searches run in
parallel, each limited to the plan's depth n — semantic (dense top-n on the semantic query),
lexical (BM25 top-n on the lexical keys) and symbolic (dense top-n among the units meeting
the plan's time range and naming one of its keys as an entity; if both constraints together
match nothing, the time range alone) — and their results are merged by set union with id
de-duplication. The union is ordered by interleaving the three rankings (semantic,
lexical, symbolic at rank 1, then at rank 2 ...), which keeps each view's strongest hits at
the top. The answerer receives exactly this union; ``retrieve`` pads the ranking with
further semantic results up to ``RECALL_DEPTH`` for recall@k.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from memlab.bounds import PositiveInt
from memlab.embed.base import Embedder
from memlab.memory.index import MetadataFilter
from memlab.memory.store import UnitMemory
from memlab.memory.structure import share
from memlab.pipelines.base import RECALL_DEPTH, Pipeline, dated_text
from memlab.stages.answer import Answerer, AnswerIn, join_context
from memlab.stages.compress import ChunkCompressor, CompressIn, Compressor, sliding_windows
from memlab.stages.plan import FixedPlanner, PlanIn, Planner, PlanOut
from memlab.stages.synthesize import SynthesizeIn, Synthesizer, union_ids
from memlab.types import Answer, History, MemoryUnit, Query, Retrieved, Session, Trace

VIEWS = ("semantic", "lexical", "symbolic")


@dataclass(frozen=True)
class PlannedRetrieval:
    plan: PlanOut
    #: Each view's ranking, by view name.
    views: dict[str, list[Retrieved]]
    #: The union given to the answerer.
    union: list[Retrieved]
    #: The union padded with further semantic results (what ``retrieve`` returns).
    ranking: list[Retrieved]


def interleave(rankings: list[list[Retrieved]]) -> list[Retrieved]:
    """Set union of the rankings, de-duplicated by unit id, ordered rank by rank across them
    (first of each, then second of each ...); ``score`` is ``1 / (1 + position)``."""
    seen: set[str] = set()
    order: list[MemoryUnit] = []
    for rank in range(max((len(r) for r in rankings), default=0)):
        for ranking in rankings:
            if rank < len(ranking) and ranking[rank].unit.id not in seen:
                seen.add(ranking[rank].unit.id)
                order.append(ranking[rank].unit)
    return [Retrieved(unit, 1.0 / (1 + i)) for i, unit in enumerate(order)]


def merge_identical(units: list[MemoryUnit]) -> list[MemoryUnit]:
    """Units with the same text (ignoring case and spacing) -> the first, with the union of
    their provenance and entities."""
    groups: dict[str, list[MemoryUnit]] = {}
    for unit in units:
        groups.setdefault(" ".join(unit.text.casefold().split()), []).append(unit)
    merged = []
    for group in groups.values():
        first = group[0]
        if len(group) > 1:
            entities = list(dict.fromkeys(e for u in group for e in u.attributes.get("entities", [])))
            first = replace(first, source_ids=union_ids(group), attributes={**first.attributes, "entities": entities})
        merged.append(first)
    return merged


class SimpleMem(Pipeline):
    """See the module docstring.

    The Table 5 ablations are null slots (a config's ``_base_`` merge can override a node's
    keys but not drop them, so swapping in an LM-free class is written as ``null``):

    * ``compressor=None``: standard chunk-based storage, each window stored as it is
      (``ChunkCompressor``; set ``stride == window`` for non-overlapping chunks);
    * ``synthesizer=None``: the compressed units are committed as they are;
    * ``planner=None``: fixed-depth retrieval (``FixedPlanner(depth=fixed_depth)``).
    """

    query_settings = ("answerer", "planner", "fixed_depth")

    def __init__(
        self,
        embedder: Embedder,
        answerer: Answerer,
        compressor: Compressor | None = None,
        synthesizer: Synthesizer | None = None,
        planner: Planner | None = None,
        window: PositiveInt = 8,
        stride: PositiveInt = 6,
        fixed_depth: PositiveInt = 10,
    ) -> None:
        super().__init__()
        sliding_windows(window, window, stride)  # validates window and stride now, not mid-run
        self.compressor = compressor if compressor is not None else ChunkCompressor()
        self.synthesizer = synthesizer
        self.embedder = embedder
        self.planner = planner if planner is not None else FixedPlanner(depth=fixed_depth)
        self.answerer = answerer
        self.window = window
        self.stride = stride

    # -- writing ----------------------------------------------------------------------------
    def windows(self, history: History, session: Session) -> list[CompressIn]:
        bounds = sliding_windows(len(session.turns), self.window, self.stride)
        return [
            CompressIn(history.id, session, session.turns[start:end], f"{session.id}/w{k}", history.speakers)
            for k, (start, end) in enumerate(bounds)
        ]

    def session_entries(self, history: History, session: Session) -> list[MemoryUnit]:
        """The entries one session commits (compression, then synthesis when enabled)."""
        units = merge_identical([u for out in self.compressor(self.windows(history, session)) for u in out.units])
        if self.synthesizer is None or not units:
            return units
        out = self.synthesizer.run_one(SynthesizeIn(history.id, session.id, session.timestamp, tuple(units)))
        return list(out.units) + list(out.abstracts)

    def load_memory(self, folder):
        return UnitMemory.load(folder, self.embedder)

    def memory_structure(self, memory: UnitMemory) -> dict[str, Any]:
        """The units' shape and what synthesis made of them (2.2): entries merged from several
        fragments, the fragments they absorbed, the abstracts beside them. What the paper implies:
        compression keeps a few units per window and synthesis merges related ones, so the memory
        holds fewer entries than the windows' units."""
        structure = memory.structure()
        problems = structure.pop("degenerate")
        units = list(memory.units.values())
        merged = [u for u in units if len(u.attributes.get("merged_from", ())) > 1]
        abstracts = sum(u.kind == "abstract" for u in units)
        sessions = structure["sessions"]
        found = {"synthesis_merges": len(merged), "merged_fragments": sum(len(u.attributes["merged_from"]) for u in merged),
                 "abstracts": abstracts, "units_per_session": share(len(units) - abstracts, sessions)}
        if not units:
            problems.append("no unit")
        elif self.synthesizer is not None and len(units) > 1 and not merged:
            problems.append("synthesis merged nothing")
        return {**structure, **found, "degenerate": problems}

    def build(self, history: History) -> UnitMemory:
        memory = UnitMemory(self.embedder)
        for session in history.sessions:
            entries = self.session_entries(history, session)
            if entries:
                memory.add(entries)  # committed session by session, as they are synthesised
        return memory

    # -- reading ----------------------------------------------------------------------------
    @staticmethod
    def symbolic_filters(plan: PlanOut) -> list[MetadataFilter]:
        """Filters to try in order: time range and entities together, then the time range alone."""
        entities = frozenset(plan.lexical_keys) or None
        filters = [MetadataFilter(start=plan.start, end=plan.end, entities=entities)]
        if entities is not None and (plan.start is not None or plan.end is not None):
            filters.append(MetadataFilter(start=plan.start, end=plan.end))
        return [f for f in filters if not f.is_empty]

    def search_views(self, memory: UnitMemory, plan: PlanOut, query: Query) -> dict[str, list[Retrieved]]:
        n = plan.depth
        vector = memory.embedder.encode_queries([plan.semantic_query])[0]
        lexical_query = " ".join(plan.lexical_keys) or query.text

        def symbolic() -> list[Retrieved]:
            for metadata in self.symbolic_filters(plan):
                hits = memory.search_dense(vector, n, filter=metadata)
                if hits:
                    return hits
            return []

        with ThreadPoolExecutor(max_workers=len(VIEWS)) as pool:
            futures = {
                "semantic": pool.submit(memory.search_dense, vector, n),
                "lexical": pool.submit(memory.search_bm25, lexical_query, n),
                "symbolic": pool.submit(symbolic),
            }
            return {name: futures[name].result() for name in VIEWS}

    def planned_retrievals(self, memory: UnitMemory, queries: list[Query]) -> list[PlannedRetrieval]:
        """One planner call for the batch, then each query's three searches."""
        plans = self.planner([PlanIn(query.text, query.timestamp) for query in queries])
        return [self.planned_retrieval(memory, query, plan) for query, plan in zip(queries, plans)]

    def planned_retrieval(self, memory: UnitMemory, query: Query, plan: PlanOut | None = None) -> PlannedRetrieval:
        """The plan (the planner's, unless given) and its three searches for one query."""
        plan = plan or self.planner.run_one(PlanIn(query.text, query.timestamp))
        if len(memory) == 0:
            return PlannedRetrieval(plan, {name: [] for name in VIEWS}, [], [])
        views = self.search_views(memory, plan, query)
        union = interleave([views[name] for name in VIEWS])
        ranking = list(union)
        if len(ranking) < RECALL_DEPTH:
            seen = {r.unit.id for r in ranking}
            extra = [r.unit for r in memory.search_dense(plan.semantic_query, RECALL_DEPTH + len(seen)) if r.unit.id not in seen]
            ranking += [Retrieved(unit, 0.0) for unit in extra[: RECALL_DEPTH - len(ranking)]]
        return PlannedRetrieval(plan, views, union, ranking)

    def retrieve_many(self, memory: UnitMemory, queries: list[Query]) -> list[list[Retrieved]]:
        return [planned.ranking for planned in self.planned_retrievals(memory, queries)]

    def retrieve(self, memory: UnitMemory, query: Query) -> list[Retrieved]:
        return self.retrieve_many(memory, [query])[0]

    def answer_many(self, memory: UnitMemory, queries: list[Query]) -> list[Answer]:
        planned = self.planned_retrievals(memory, queries)
        prepared = [self.answer_input(query, p) for query, p in zip(queries, planned)]
        outputs = self.answerer([item for item, _ in prepared])
        answers = []
        for (item, trace), p, out in zip(prepared, planned, outputs):
            trace.add("answer", text=out.text, error=out.error)
            answers.append(Answer(text=out.text, retrieved=p.ranking, context=item.memory_text(), error=out.error,
                                  trace=trace))
        return answers

    def answer(self, memory: UnitMemory, query: Query) -> Answer:
        return self.answer_many(memory, [query])[0]

    def answer_input(self, query: Query, planned: PlannedRetrieval) -> tuple[AnswerIn, Trace]:
        """The answerer's input from a planned retrieval, and the trace of the plan and the searches."""
        trace = Trace()
        plan = planned.plan
        trace.add(
            "plan", complexity=plan.complexity, depth=plan.depth, semantic_query=plan.semantic_query,
            lexical_keys=list(plan.lexical_keys), start=plan.start.isoformat() if plan.start else None,
            end=plan.end.isoformat() if plan.end else None, error=plan.error,
        )
        trace.add("retrieve", **{name: [r.unit.id for r in hits] for name, hits in planned.views.items()},
                  union=[r.unit.id for r in planned.union])
        units = [r.unit for r in planned.union]
        item = AnswerIn(
            query.text, join_context([], [dated_text(u) for u in units if u.kind != "abstract"]), query.timestamp,
            abstracts=tuple(dated_text(u) for u in units if u.kind == "abstract"),
        )
        return item, trace
