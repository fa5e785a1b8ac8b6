"""Prompted answerer: a published response prompt filled with the context and question."""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.dates import format_day
from memlab.lm.base import LM
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.answer.base import Answerer, AnswerIn, AnswerOut, clean_answer


class PromptedAnswerer(PromptedStage, Answerer):
    """Answers with one LLM call on ``prompt`` (placeholders ``{context}`` and ``{question}``).

    The default is CompassMem's response-generation prompt (appendix F.2). When the question
    date is known it is stated above the context, since "how long ago" questions need it.
    """

    def __init__(
        self,
        lm: LM,
        prompt: str = "compassmem/answer",
        max_tokens: PositiveInt = 64,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)

    def render(self, item: AnswerIn) -> ChatRequest:
        context = item.memory_text()
        if item.question_date is not None:
            context = f"(The question is asked on {format_day(item.question_date)}.)\n{context}"
        return self.request(self.prompt.render(context=context, question=item.question))

    def parse(self, text: str, item: AnswerIn) -> AnswerOut:
        return AnswerOut(text=clean_answer(text))

    def fallback(self, item: AnswerIn, error: str) -> AnswerOut:
        return AnswerOut(text="", error=error)
