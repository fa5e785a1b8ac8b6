"""Prompted answerer: a published response prompt filled with the context and question."""

from __future__ import annotations

from memlab.dates import format_day
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.answer.base import AnswerIn, AnswerOut, Answerer


class PromptedAnswerer(PromptedStage, Answerer):
    """Answers with one LLM call on ``prompt`` (placeholders ``{context}`` and ``{question}``).

    The default is CompassMem's response-generation prompt (appendix F.2). When the question
    date is known it is stated above the context, since "how long ago" questions need it.
    """

    def __init__(
        self,
        lm: LM,
        prompt: str = "compassmem/answer",
        max_tokens: int = 64,
        temperature: float = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)

    def render(self, item: AnswerIn) -> ChatRequest:
        context = item.memory_text()
        if item.question_date is not None:
            context = f"(The question is asked on {format_day(item.question_date)}.)\n{context}"
        return self.request(self.prompt.render(context=context, question=item.question))

    def parse(self, text: str, item: AnswerIn) -> AnswerOut:
        answer = text.strip()
        # Small models sometimes echo the template's label; the answer is what follows it.
        if answer.upper().startswith("ANSWER:"):
            answer = answer[len("ANSWER:"):].strip()
        if not answer:
            raise ParseError("empty answer")
        return AnswerOut(text=answer)

    def fallback(self, item: AnswerIn, error: str) -> AnswerOut:
        return AnswerOut(text="", error=error)
