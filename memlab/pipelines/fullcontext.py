"""Full-context baseline: the whole history in the prompt, cut from the oldest side."""

from __future__ import annotations

from typing import Callable

from memlab.bounds import NonNegativeInt, PositiveInt
from memlab.lm.base import LM
from memlab.memory.unit_list import load_units, save_units
from memlab.pipelines.base import Pipeline, render_units
from memlab.stages.answer import Answerer, AnswerIn
from memlab.stages.segment import Segmenter, SegmentIn, TurnSegmenter
from memlab.types import Answer, History, MemoryUnit, Query, Retrieved, Trace


class FullContext(Pipeline):
    """Every turn (dated, one per line) goes to the answerer, newest kept when it does not fit.

    The budget is ``max_context_tokens`` or, when None, the answering model's context window
    minus ``reserve_tokens`` (room for the prompt template and the answer), counted with the
    answering model's tokenizer. ``retrieve`` ranks turns newest first: the order in which
    they are kept.
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

    def build(self, history: History) -> list[MemoryUnit]:
        outputs = self.segmenter([SegmentIn(history.id, s) for s in history.sessions])
        return [unit for out in outputs for unit in out.units]

    def retrieve(self, memory: list[MemoryUnit], query: Query) -> list[Retrieved]:
        n = len(memory)
        return [Retrieved(unit, float(n - i)) for i, unit in enumerate(reversed(memory))]

    def _token_counter(self) -> tuple[Callable[[str], int], int]:
        lm = getattr(self.answerer, "lm", None)
        if isinstance(lm, LM):
            budget = self.max_context_tokens or lm.context_window - self.reserve_tokens
            return lm.count_tokens, budget
        from memlab.embed import default_token_counter

        return default_token_counter(), self.max_context_tokens or 4096 - self.reserve_tokens

    def answer(self, memory: list[MemoryUnit], query: Query) -> Answer:
        ranking = self.retrieve(memory, query)
        count, budget = self._token_counter()
        kept: list[MemoryUnit] = []
        used = 0
        for r in ranking:
            n = count(r.unit.text) + 1  # +1 for the newline between units
            if used + n > budget:
                break
            kept.append(r.unit)
            used += n
        kept.reverse()  # back to chronological order
        context = render_units(kept)
        trace = Trace()
        trace.add("truncate", kept=len(kept), dropped=len(memory) - len(kept), budget=budget)
        out = self.answerer.run_one(AnswerIn(query.text, context, query.timestamp))
        trace.add("answer", text=out.text, error=out.error)
        return Answer(text=out.text, retrieved=ranking[: len(kept)], context=context, error=out.error, trace=trace)
