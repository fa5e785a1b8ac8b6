"""SimpleMem's answerer: the reconstructive-synthesis prompt (appendix A.3).

The prompt reads abstract representations and detailed memory units in two blocks:
``AnswerIn.abstracts`` and the lines of ``AnswerIn.context`` (one entry per line), read back
from their one rendering (``AnswerIn.memory_text``, which any other answerer reads whole).

With ``answer_suffix`` (the default) memlab's short instructions from
``simplemem/answer_suffix`` (answer from an entry that states or implies the answer, abstain
only when none does) are inserted before A.3's closing answer cue; every A.3 line stays
verbatim. ``answer_suffix=False`` renders A.3 alone, the faithful variant.
"""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.dates import format_day
from memlab.lm.base import LM
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.answer.base import Answerer, AnswerIn, AnswerOut, clean_answer, split_context

NONE_RETRIEVED = "(none)"



def _block(lines: list[str]) -> str:
    """Memory lines as the prompt lists them (``- line``), or the prompt's "none retrieved"."""
    return ("\n" + "\n".join(f"- {line}" for line in lines) + "\n") if lines else NONE_RETRIEVED

class ReconstructiveAnswerer(PromptedStage, Answerer):
    """One call on ``prompt`` (placeholders ``user_query``, ``retrieved_abstracts``,
    ``retrieved_units``). When the question date is known it is stated before the units.
    ``suffix`` (used when ``answer_suffix``) goes before the prompt's last line, its answer cue."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "simplemem/answer",
        answer_suffix: bool = True,
        suffix: str = "simplemem/answer_suffix",
        max_tokens: PositiveInt = 64,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.suffix = load_prompt(suffix).render() if answer_suffix else None

    def render(self, item: AnswerIn) -> ChatRequest:
        abstracts, units = split_context(item.memory_text())
        if item.question_date is not None:
            units = [f"(The question is asked on {format_day(item.question_date)}.)"] + units
        text = self.prompt.render(
            user_query=item.question, retrieved_abstracts=_block(abstracts), retrieved_units=_block(units)
        )
        if self.suffix is not None:
            body, _, cue = text.rstrip().rpartition("\n")
            text = f"{body}\n{self.suffix}\n{cue}"
        return self.request(text)

    def parse(self, text: str, item: AnswerIn) -> AnswerOut:
        return AnswerOut(text=clean_answer(text))

    def fallback(self, item: AnswerIn, error: str) -> AnswerOut:
        return AnswerOut(text="", error=error)
