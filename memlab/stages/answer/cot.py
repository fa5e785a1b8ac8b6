"""Zero-shot chain-of-thought answerer: reason over the context first, then a concise answer.

EMem 3.3's QA step (Wei et al.'s zero-shot CoT). The prompt asks for the reasoning and a
final ``Answer: ...`` line; the answer is what follows the last such marker, the reasoning
is kept in ``AnswerOut.reasoning`` for traces. A reply without the marker (with a small
model: reasoning cut off by ``max_tokens``, or an answer without its label) gets one
follow-up asking for the final line only: the answer-extraction step of zero-shot CoT
(Kojima et al., 2022), which keeps the model from resuming the reasoning. If that has no
marker either, the answer is empty and ``error`` says why (counted failure).
"""

from __future__ import annotations

import re

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.dates import format_day
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import visible_text
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.answer.base import Answerer, AnswerIn, AnswerOut

# "Answer:", "**Final answer:**", "The final answer is:" at the start of a line, and any
# further "Answer:" labels right after it ("The final answer is: Answer: ..."). Small models
# echo the instruction's wording as a label ("Final line: Answer: ..."), so that is allowed too.
_MARKER = re.compile(
    r"(?:^|\n)[ \t]*(?:\*\*)?(?:final\s+line\s*:\s*)?(?:the\s+)?(?:final\s+)?answer(?:\s+is)?(?:\*\*)?\s*:\s*(?:\*\*)?"
    r"(?:(?:final\s+)?answer\s*:\s*)*",
    re.IGNORECASE,
)


class CoTAnswerer(PromptedStage, Answerer):
    """Answers with one reasoning-then-answer call on ``prompt`` ({context}, {question})."""

    RETRY_MESSAGE = (
        "Your reply has no final answer line ({error}). Do not go on reasoning: reply with only "
        "the final line, \"Answer: \" followed by a concise answer (a short phrase, not a sentence)."
    )

    def __init__(
        self,
        lm: LM,
        prompt: str = "emem/answer_cot",
        max_tokens: PositiveInt = 512,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)

    def render(self, item: AnswerIn) -> ChatRequest:
        context = item.memory_text() or "(no memories)"
        if item.question_date is not None:
            context = f"(The question is asked on {format_day(item.question_date)}.)\n{context}"
        return self.request(self.prompt.render(context=context, question=item.question))

    def parse(self, text: str, item: AnswerIn) -> AnswerOut:
        text = visible_text(text)
        markers = list(_MARKER.finditer(text))
        if not markers:
            raise ParseError("no final 'Answer:' line")
        last = markers[-1]
        answer = text[last.end():].strip().splitlines()
        answer_text = answer[0].strip().strip("*").strip() if answer else ""
        if not answer_text:
            raise ParseError("the 'Answer:' line is empty")
        return AnswerOut(text=answer_text, reasoning=text[: last.start()].strip())

    def fallback(self, item: AnswerIn, error: str) -> AnswerOut:
        return AnswerOut(text="", error=error)
