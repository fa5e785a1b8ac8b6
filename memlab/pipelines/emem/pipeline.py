"""EMem and EMem-G (A Simple Yet Strong Baseline for Long-Term Conversational Memory, 3.2-3.4).

Both build the same ``EduMemory`` (``memlab.pipelines.emem.memory``): EDUs per session, event arguments,
and the session/EDU/argument graph. At query time:

* **EMem** (3.4): dense top-``linking_top_k`` EDUs -> recall-oriented LLM filter -> the kept
  EDUs (as many as the filter keeps) go to the answerer.
* **EMem-G** (3.3): the same dense candidates and filter for EDUs; an LLM mention detector on
  the question, the top-``argument_top_k`` arguments per mention, the filter over those
  arguments; seeds = query/EDU and mention/argument cosines (only the ``seed_arguments``
  best arguments kept); Personalized PageRank; the top-``qa_top_k`` EDUs by PPR score go
  to the answerer.

Ablations (Tables 5-6) are configurations: ``edu_filter: null`` (w/o EDU filter),
``mention_detector: null`` (w/o query mention detection: EDU seeds only),
``EntityMentionDetector`` (w/ named-entity mentions), ``PromptedAnswerer`` with
``emem/answer`` (w/o QA zero-shot CoT), and ``EMem`` itself is EMem-G w/o graph & PPR.

``retrieve`` returns the selected EDUs first (in filter / PPR order), then the rest of the
dense EDU ranking, down to at least ``RECALL_DEPTH`` units, so recall@k is defined; only the
selected ones are given to the answerer. Retrieval calls the filter and mention LLMs (they
are part of retrieval in the paper) but never the answerer. Structured-chunk EDUs show
their full ``content`` to the answerer instead of their summary.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memlab.bounds import NonNegativeInt, OpenUnitFloat, PositiveInt, UnitFloat
from memlab.dates import format_day
from memlab.embed.base import Embedder
from memlab.memory.ppr import personalized_pagerank
from memlab.pipelines.base import RECALL_DEPTH, Pipeline, extends_signature
from memlab.pipelines.emem.memory import EduMemory, build_event_memory
from memlab.stages.answer import Answerer, AnswerIn
from memlab.stages.arguments import ArgumentExtractor
from memlab.stages.filter import FilterIn, RelevanceFilter
from memlab.stages.mention import MentionDetector, MentionIn
from memlab.stages.segment import Segmenter
from memlab.types import Answer, History, MemoryUnit, Query, Retrieved, Trace


def render_edu(unit: MemoryUnit, full: bool = True) -> str:
    """``[session date] (speakers) text``; with ``full``, a structured chunk shows its content
    (for the answerer) instead of its summary ``text(e)`` (what retrieval and filters see)."""
    date = format_day(unit.timestamp) if unit.timestamp else "unknown date"
    speakers = ", ".join(unit.attributes.get("speakers", ())) or unit.speaker or ""
    body = (unit.attributes.get("content") if full else None) or unit.text
    return f"[{date}]" + (f" ({speakers})" if speakers else "") + f" {body}"


def render_context(units: list[MemoryUnit]) -> str:
    return "\n".join(render_edu(unit) for unit in units)


class EventMemoryPipeline(Pipeline):
    """What EMem and EMem-G share: memory building, the dense + filter step, answering. Its
    arguments are declared here once; a variant adds its own (``EMemG``).

    ``qa_top_k`` caps the EDUs given to the answerer (None: all that are selected).
    """

    query_settings = ("answerer", "edu_filter", "linking_top_k", "qa_top_k")

    def __init__(
        self,
        extractor: Segmenter,
        embedder: Embedder,
        answerer: Answerer,
        edu_filter: RelevanceFilter | None = None,
        argument_extractor: ArgumentExtractor | None = None,
        linking_top_k: PositiveInt = 30,
        argument_batch: PositiveInt = 8,
        synonym_threshold: UnitFloat = 0.9,
        synonym_cap: NonNegativeInt = 100,
        qa_top_k: PositiveInt | None = None,
    ) -> None:
        super().__init__()
        self.qa_top_k = qa_top_k
        self.extractor = extractor
        self.argument_extractor = argument_extractor
        self.edu_filter = edu_filter
        self.answerer = answerer
        self.embedder = embedder
        self.linking_top_k = linking_top_k
        self.argument_batch = argument_batch
        self.synonym_threshold = synonym_threshold
        self.synonym_cap = synonym_cap

    def load_memory(self, folder):
        return EduMemory.load(folder, self.embedder)

    def build(self, history: History) -> EduMemory:
        return build_event_memory(
            history,
            self.extractor,
            self.embedder,
            self.argument_extractor,
            argument_batch=self.argument_batch,
            synonym_threshold=self.synonym_threshold,
            synonym_cap=self.synonym_cap,
        )

    def filtered_candidates(self, memory: EduMemory, query: Query, trace: Trace) -> tuple[list[Retrieved], list[Retrieved]]:
        """(dense ranking to recall depth, the linking candidates the EDU filter keeps)."""
        dense = memory.edus.search_dense(query.text, k=max(self.linking_top_k, RECALL_DEPTH))
        candidates = dense[: self.linking_top_k]
        if self.edu_filter is None or not candidates:
            kept = candidates
        else:
            out = self.edu_filter.run_one(FilterIn(query.text, tuple(render_edu(r.unit, full=False) for r in candidates)))
            kept = [candidates[i] for i in out.keep]
            trace.add("edu_filter", candidates=len(candidates), kept=[r.unit.id for r in kept], error=out.error)
        return dense, kept

    def select(self, memory: EduMemory, query: Query, trace: Trace) -> tuple[list[MemoryUnit], list[Retrieved]]:
        """(EDUs for the answerer, the full ranking); see the module docstring."""
        raise NotImplementedError

    def retrieve(self, memory: EduMemory, query: Query) -> list[Retrieved]:
        return self.select(memory, query, Trace())[1]

    def answer_many(self, memory: EduMemory, queries: list[Query]) -> list[Answer]:
        """Selection per query, then one answerer call for the batch."""
        traces = [Trace() for _ in queries]
        selected = [self.select(memory, query, trace) for query, trace in zip(queries, traces)]
        contexts = [render_context(chosen) for chosen, _ in selected]
        outputs = self.answerer([AnswerIn(q.text, context, q.timestamp) for q, context in zip(queries, contexts)])
        answers = []
        for (chosen, ranking), context, trace, out in zip(selected, contexts, traces, outputs):
            trace.add("retrieve", units=[u.id for u in chosen])
            trace.add("answer", text=out.text, reasoning=out.reasoning, error=out.error)
            answers.append(Answer(text=out.text, retrieved=ranking, context=context, error=out.error, trace=trace))
        return answers

    def answer(self, memory: EduMemory, query: Query) -> Answer:
        return self.answer_many(memory, [query])[0]


def _complete(head: list[Retrieved], dense: list[Retrieved]) -> list[Retrieved]:
    """``head`` followed by the dense ranking's other units (the recall-depth tail)."""
    seen = {r.unit.id for r in head}
    return head + [r for r in dense if r.unit.id not in seen]


class EMem(EventMemoryPipeline):
    """EMem (3.4): dense top-``linking_top_k`` EDUs, the LLM filter decides how many go on.

    ``qa_top_k`` optionally caps the EDUs given to the answerer (None: all kept ones, as in
    the paper). EMem never uses arguments: leave ``argument_extractor`` null to skip their
    extraction cost.
    """

    def memory_structure(self, memory: EduMemory) -> dict[str, Any]:
        return memory.structure(graph=False)  # EDUs alone: EMem has no argument graph to form

    def select(self, memory: EduMemory, query: Query, trace: Trace) -> tuple[list[MemoryUnit], list[Retrieved]]:
        dense, kept = self.filtered_candidates(memory, query, trace)
        chosen = [r.unit for r in kept][: self.qa_top_k]
        return chosen, _complete(kept, dense)


class EMemG(EventMemoryPipeline):
    """EMem-G (3.3): EDU and argument seeds, Personalized PageRank, top-``qa_top_k`` EDUs.

    ``argument_top_k`` = K_a arguments per mention; ``seed_arguments`` = K, the most argument
    seeds kept (default: ``linking_top_k``, which the paper says bounds them, 4.5);
    ``damping`` = alpha of ``memlab.memory.ppr``. When the filters leave no seed at all, the
    unfiltered dense candidates seed PPR (it needs one). The other arguments are
    ``EventMemoryPipeline``'s (``qa_top_k`` defaults to 10 here).
    """

    query_settings = EventMemoryPipeline.query_settings + (
        "mention_detector", "argument_filter", "argument_top_k", "seed_arguments", "damping", "ppr_iterations")

    @extends_signature(EventMemoryPipeline)
    def __init__(
        self,
        *,
        mention_detector: MentionDetector | None = None,
        argument_filter: RelevanceFilter | None = None,
        argument_top_k: PositiveInt = 10,
        seed_arguments: PositiveInt | None = None,
        qa_top_k: PositiveInt | None = 10,
        damping: OpenUnitFloat = 0.5,
        ppr_iterations: PositiveInt = 50,
        **shared: Any,
    ) -> None:
        super().__init__(qa_top_k=qa_top_k, **shared)
        self.mention_detector = mention_detector
        self.argument_filter = argument_filter
        self.argument_top_k = argument_top_k
        self.seed_arguments = seed_arguments
        self.damping = damping
        self.ppr_iterations = ppr_iterations

    def argument_seeds(self, memory: EduMemory, query: Query, trace: Trace) -> dict[str, float]:
        """Argument node id -> seed weight (best mention cosine), filtered and capped."""
        if self.mention_detector is None or len(memory.arguments) == 0:
            return {}
        known = tuple(u.text for u in memory.arguments.units.values())
        detected = self.mention_detector.run_one(MentionIn(query.text, known))
        best: dict[str, float] = {}
        for mention in detected.mentions:
            for hit in memory.arguments.search_dense(mention, k=self.argument_top_k):
                best[hit.unit.id] = max(best.get(hit.unit.id, 0.0), hit.score)
        candidates = sorted(best, key=lambda a: -best[a])
        trace.add("mentions", mentions=list(detected.mentions), arguments=candidates, error=detected.error)
        if self.argument_filter is not None and candidates:
            texts = tuple(memory.arguments.get(a).text for a in candidates)
            out = self.argument_filter.run_one(FilterIn(query.text, texts))
            candidates = [candidates[i] for i in out.keep]
            trace.add("argument_filter", kept=candidates, error=out.error)
        limit = self.seed_arguments if self.seed_arguments is not None else self.linking_top_k
        return {a: best[a] for a in sorted(candidates, key=lambda a: -best[a])[:limit] if best[a] > 0}

    def select(self, memory: EduMemory, query: Query, trace: Trace) -> tuple[list[MemoryUnit], list[Retrieved]]:
        dense, kept = self.filtered_candidates(memory, query, trace)
        if not dense:
            return [], []
        seeds = {r.unit.id: r.score for r in kept if r.score > 0}
        seeds.update(self.argument_seeds(memory, query, trace))
        if not seeds:
            seeds = {r.unit.id: max(r.score, 1e-6) for r in dense[: self.linking_top_k]}
        vector = np.zeros(len(memory.node_ids))
        for node, weight in seeds.items():
            vector[memory.node_index[node]] = weight
        pi = personalized_pagerank(memory.adjacency, vector, damping=self.damping, iterations=self.ppr_iterations)
        edus = [(memory.node_ids[i], pi[i]) for i in np.flatnonzero(memory.edu_mask & (pi > 0))]
        edus.sort(key=lambda p: -p[1])
        head = [Retrieved(memory.edus.get(node), float(score)) for node, score in edus]
        trace.add("ppr", seeds=len(seeds), damping=self.damping, top=[node for node, _ in edus[: self.qa_top_k]])
        return [r.unit for r in head[: self.qa_top_k]], _complete(head, dense)
