"""Full-context baseline: the whole history in the prompt, cut from the oldest side."""

from __future__ import annotations

from memlab.bounds import NonNegativeInt, PositiveInt
from memlab.memory.unit_list import load_units, save_units
from memlab.pipelines.base import Pipeline, render_units
from memlab.pipelines.context_budget import answer_budget, fit_units
from memlab.stages.answer import Answerer, AnswerIn
from memlab.stages.segment import Segmenter, SegmentIn, TurnSegmenter
from memlab.types import Answer, History, MemoryUnit, Query, Retrieved, Trace


class FullContext(Pipeline):
    """Every turn (dated, one per line) goes to the answerer, newest kept when it does not fit.

    The budget is ``memlab.pipelines.context_budget``'s (``max_context_tokens``, else the
    answering model's window less ``reserve_tokens``). ``retrieve`` ranks turns newest first:
    the order in which they are kept.
    """

    query_settings = ("answerer", "max_context_tokens", "reserve_tokens")

    def __init__(
        self,
        answerer: Answerer,
        segmenter: Segmenter | None = None,
        max_context_tokens: PositiveInt | None = None,
        reserve_tokens: NonNegativeInt = 512,
    ) -> None:
        super().__init__()
        self.answerer = answerer
        self.segmenter = segmenter if segmenter is not None else TurnSegmenter()
        self.max_context_tokens = max_context_tokens
        self.reserve_tokens = reserve_tokens

    def save_memory(self, memory: list[MemoryUnit], folder) -> None:
        save_units(folder, memory)

    def load_memory(self, folder) -> list[MemoryUnit]:
        return load_units(folder)

    def memory_stats(self, memory: list[MemoryUnit]) -> dict:
        """Nothing to report: the memory is the turns themselves, in order."""
        return {}

    def build(self, history: History) -> list[MemoryUnit]:
        outputs = self.segmenter([SegmentIn(history.id, s) for s in history.sessions])
        return [unit for out in outputs for unit in out.units]

    def retrieve(self, memory: list[MemoryUnit], query: Query) -> list[Retrieved]:
        n = len(memory)
        return [Retrieved(unit, float(n - i)) for i, unit in enumerate(reversed(memory))]

    def answer(self, memory: list[MemoryUnit], query: Query) -> Answer:
        ranking = self.retrieve(memory, query)
        count, budget = answer_budget(self.answerer, self.max_context_tokens, self.reserve_tokens)
        kept = fit_units([r.unit for r in ranking], count, budget)
        kept.reverse()  # back to chronological order
        context = render_units(kept)
        trace = Trace()
        trace.add("truncate", kept=len(kept), dropped=len(memory) - len(kept), budget=budget)
        out = self.answerer.run_one(AnswerIn(query.text, context, query.timestamp))
        trace.add("answer", text=out.text, error=out.error)
        return Answer(text=out.text, retrieved=ranking[: len(kept)], context=context, shown=len(kept),
                      error=out.error, trace=trace)
