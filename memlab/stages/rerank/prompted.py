"""Listwise LLM reranker: one JSON-schema-constrained call per query ranks the numbered candidates."""

from __future__ import annotations

from typing import Annotated

from memlab.bounds import NonNegativeFloat, PositiveInt, Range
from memlab.lm.base import LM
from memlab.lm.jsonparse import list_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.rerank.base import Reranker, RerankIn, RerankOut


def ranking_schema(n_candidates: int | None = None) -> dict:
    """``{"ranking": [int, ...]}``; bounded to ``n_candidates`` items for the request only."""
    schema = list_schema({"type": "integer"}, key="ranking")
    if n_candidates is not None:
        schema["properties"]["ranking"]["maxItems"] = max(1, n_candidates)
    return schema


def order_scores(n: int, ranked: list[int]) -> tuple[float, ...]:
    """Scores realising the order: ``ranked`` indices first (in that order), the rest in input order."""
    listed = list(dict.fromkeys(ranked))
    order = listed + sorted(set(range(n)) - set(listed))
    scores = [0.0] * n
    for position, index in enumerate(order):
        scores[index] = float(n - position)
    return tuple(scores)


class PromptedReranker(PromptedStage, Reranker):
    """The first ``max_candidates`` candidates are shown numbered from 1, each cut to
    ``max_chars_per_candidate``; the reply lists the helpful numbers best first.

    Listed candidates score above unlisted ones; unlisted (and unshown) candidates keep their
    input order. Numbers outside the shown list are ignored. An empty list costs no call.
    Fallback (unusable reply after the retry): the input order.
    """

    def __init__(
        self,
        lm: LM,
        prompt: str = "memlab/rerank_listwise",
        max_candidates: PositiveInt = 20,
        max_chars_per_candidate: Annotated[int, Range(min=4)] = 300,
        max_tokens: PositiveInt = 160,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.max_candidates = max_candidates
        self.max_chars_per_candidate = max_chars_per_candidate

    def _shown(self, item: RerankIn) -> tuple[str, ...]:
        return item.candidates[: self.max_candidates]

    def render(self, item: RerankIn) -> ChatRequest:
        limit = self.max_chars_per_candidate
        lines = "\n".join(
            f"{i}. {text if len(text) <= limit else text[: limit - 3] + '...'}"
            for i, text in enumerate(self._shown(item), start=1)
        )
        return self.request(self.prompt.render(question=item.query, candidates=lines),
                            json_schema=ranking_schema(len(self._shown(item))))

    def parse(self, text: str, item: RerankIn) -> RerankOut:
        # Parsed without the bound: repeated or out-of-range numbers are dropped, not retried.
        numbers = parse_json(text, ranking_schema())["ranking"]
        shown = len(self._shown(item))
        ranked = [n - 1 for n in numbers if isinstance(n, int) and 1 <= n <= shown]
        return RerankOut(order_scores(len(item.candidates), ranked))

    def fallback(self, item: RerankIn, error: str) -> RerankOut:
        return RerankOut(order_scores(len(item.candidates), []), error=error)

    def forward(self, batch: list[RerankIn]) -> list[RerankOut]:
        return self.forward_where(batch, lambda item: item.candidates, lambda item: RerankOut(()))
