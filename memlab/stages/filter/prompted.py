"""Recall-oriented LLM relevance filter (EMem 3.3 / 3.4): one call per question and candidate list."""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.jsonparse import list_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.filter.base import FilterIn, FilterOut, RelevanceFilter


def selection_schema(n_candidates: int | None = None) -> dict:
    """``{"relevant": [int, ...]}``; bounded to ``n_candidates`` items for the request only."""
    schema = list_schema({"type": "integer"}, key="relevant")
    if n_candidates is not None:
        schema["properties"]["relevant"]["maxItems"] = max(1, n_candidates)
    return schema


class PromptedRelevanceFilter(PromptedStage, RelevanceFilter):
    """Candidates are shown numbered from 1; the reply lists the numbers to keep.

    Numbers outside the list are ignored (a filter only keeps given candidates); an empty
    candidate list costs no call. ``prompt``: ``emem/filter_edus`` or ``emem/filter_arguments``.
    Fallback (unusable reply after the retry): keep every candidate, the recall-oriented choice.
    """

    def __init__(
        self,
        lm: LM,
        prompt: str = "emem/filter_edus",
        max_chars_per_candidate: PositiveInt = 400,
        max_tokens: PositiveInt = 160,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.max_chars_per_candidate = max_chars_per_candidate

    def render(self, item: FilterIn) -> ChatRequest:
        limit = self.max_chars_per_candidate
        lines = "\n".join(
            f"{i}. {text if len(text) <= limit else text[: limit - 3] + '...'}"
            for i, text in enumerate(item.candidates, start=1)
        )
        return self.request(
            self.prompt.render(question=item.question, candidates=lines),
            json_schema=selection_schema(len(item.candidates)),
        )

    def parse(self, text: str, item: FilterIn) -> FilterOut:
        # Parsed without the bound: repeated or out-of-range numbers are dropped below, not retried.
        numbers = parse_json(text, selection_schema())["relevant"]
        keep = sorted({n - 1 for n in numbers if isinstance(n, int) and 1 <= n <= len(item.candidates)})
        return FilterOut(tuple(keep))

    def fallback(self, item: FilterIn, error: str) -> FilterOut:
        return FilterOut(tuple(range(len(item.candidates))), error=error)

    def forward(self, batch: list[FilterIn]) -> list[FilterOut]:
        return self.forward_where(batch, lambda item: item.candidates, lambda item: FilterOut(()))
