"""MAGMA's query-adaptive answerer (appendix C.2): one prompt, an instruction picked per question.

The router (not a gold label) gives each question a type; the pipeline passes it in
``AnswerIn.question_type`` and its time window in ``AnswerIn.constraints``. An input without a
type gets ``default_type``'s instruction.
"""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.dates import format_day
from memlab.lm.base import LM
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.answer.base import Answerer, AnswerIn, AnswerOut, clean_answer

#: Appendix C.2's "Dynamic Instruction Injection Candidates", verbatim, by question type.
DYNAMIC_INSTRUCTIONS: dict[str, str] = {
    "multi-hop": "Connect related facts across different nodes. For comparison queries (e.g., 'both/all'), "
                 "identify commonalities between entities rather than listing individual details.",
    "temporal": "Resolve relative dates (e.g., 'yesterday') using the event timestamps. Output dates strictly in "
                "'D Month YYYY' format. Calculate durations if asked.",
    "open-domain": "Make reasonable inferences based on the user's personality traits, interests, and past "
                   "behaviors. Support hypothetical ('would/could') reasoning with evidence.",
    "single-hop": "Extract the specific entity, name, or method requested. Do not add explanations. Return the "
                  "exact fact matching the query intent.",
}


class AdaptiveAnswerer(PromptedStage, Answerer):
    """Answers with ``prompt`` ({context}, {question}, {category_specific_constraints},
    {dynamic_instruction}); the instruction is ``instructions[question_type]``."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "magma/answer",
        instructions: dict[str, str] | None = None,
        default_type: str = "single-hop",
        max_tokens: PositiveInt = 64,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.instructions = dict(DYNAMIC_INSTRUCTIONS if instructions is None else instructions)
        if default_type not in self.instructions:
            raise ValueError(f"default_type {default_type!r} has no instruction (have {sorted(self.instructions)})")
        self.default_type = default_type

    def render(self, item: AnswerIn) -> ChatRequest:
        instruction = self.instructions.get(item.question_type or "", self.instructions[self.default_type])
        constraints = [item.constraints]
        if item.question_date is not None:
            constraints.append(f"the question is asked on {format_day(item.question_date)}")
        text = self.prompt.render(
            context=item.memory_text() or "(no memories)",
            question=item.question,
            category_specific_constraints="; ".join(c for c in constraints if c) or "none",
            dynamic_instruction=instruction,
        )
        return self.request(text)

    def parse(self, text: str, item: AnswerIn) -> AnswerOut:
        return AnswerOut(text=clean_answer(text))

    def fallback(self, item: AnswerIn, error: str) -> AnswerOut:
        return AnswerOut(text="", error=error)
