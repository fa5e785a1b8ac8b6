"""Prompted sub-goal planner: CompassMem's "Strategic Planning Prompt" (appendix F.2, Eq. 7)."""

from __future__ import annotations

import re

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import visible_text
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.line_format import clean_value
from memlab.stages.subgoal.base import SubgoalIn, SubgoalOut, SubgoalPlanner

#: The most sub-goals kept (Eq. 7: |H_q| in [2, 5]).
MAX_SUBGOALS = 5

# "Sub-goal 1: ...", with what a small model adds: "**Sub-goal 1:** ...", "- Subgoal 2) ...",
# "### Sub goal 3 - ...", "1. Sub-goal 1: ...". The text stays on the label's line.
_LINE = re.compile(
    r"^[ \t>*#_`-]*(?:\d{1,2}[.)][ \t*_]*)?sub[ \t_-]*goal[ \t*_#]*\d{1,2}[ \t*_]*[:.)-][ \t*_]*(?P<text>[^\n]*)$",
    re.IGNORECASE | re.MULTILINE,
)


def _norm(text: str) -> str:
    return " ".join(text.casefold().rstrip(" .?!").split())


def subgoal_lines(text: str) -> list[str]:
    """The texts of the ``Sub-goal N:`` lines of ``text``, cleaned, in order (blank ones left out)."""
    return [line for line in (clean_value(m.group("text")) for m in _LINE.finditer(text)) if line]


class PromptedSubgoalPlanner(PromptedStage, SubgoalPlanner):
    """One call per question on ``prompt`` ({question}); the reply's ``Sub-goal N:`` lines.

    Reading: markdown, bullets and brackets around a line are dropped; repeats (ignoring case
    and final punctuation) and the prompt's own example lines (``[First specific information
    need]`` ..., read from the template) are left out; the first ``MAX_SUBGOALS`` are kept.
    One sub-goal is accepted although the paper asks for 2-5: a question with one information
    need is not a failed call. A reply with no ``Sub-goal N:`` line (or only the examples) is a
    ``ParseError``: retried once, then the fallback, the question itself as the one sub-goal.

    No ``stop``: the format has no reasoning field after the sub-goals to cut off.
    """

    def __init__(
        self,
        lm: LM,
        prompt: str = "compassmem/plan_subgoals",
        max_tokens: PositiveInt = 160,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.examples = frozenset(_norm(line) for line in subgoal_lines(self.prompt.body))

    def render(self, item: SubgoalIn) -> ChatRequest:
        return self.request(self.prompt.render(question=item.question))

    def parse(self, text: str, item: SubgoalIn) -> SubgoalOut:
        lines = subgoal_lines(visible_text(text))
        if not lines:
            raise ParseError("no 'Sub-goal N:' line")
        kept: dict[str, str] = {}
        for line in lines:
            key = _norm(line)
            if key and key not in self.examples:
                kept.setdefault(key, line)
        if not kept:
            raise ParseError("the sub-goals are the prompt's own examples")
        return SubgoalOut(tuple(kept.values())[:MAX_SUBGOALS])

    def fallback(self, item: SubgoalIn, error: str) -> SubgoalOut:
        return SubgoalOut((item.question,), error=error)
