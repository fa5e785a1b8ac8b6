"""Prompted query refiner: CompassMem's "Refinement Query Prompt" (appendix F.2, Eq. 8)."""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import visible_text
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.line_format import (
    clean_value,
    field_reader,
    first,
    label_pattern,
    numbered,
    read_fields,
    says_none,
    subgoal_indices,
)
from memlab.stages.refine.base import QueryRefiner, RefineIn, RefineOut, fallback_query

_FIELDS = field_reader({
    "query": label_pattern("new query", "refined query", "new search query", "refined search query"),
    "targets": label_pattern("target sub goals", "target sub goal", "targets"),
    "reasoning": label_pattern("reasoning", "explanation"),
})

#: What ``{context_so_far}`` shows before any evidence is kept (memlab's wording: the paper
#: does not say).
NO_EVIDENCE = "(No information collected yet)"


class PromptedQueryRefiner(PromptedStage, QueryRefiner):
    """One call on ``prompt`` ({original_question}, {satisfied_text}, {unsatisfied_text},
    {context_so_far}) -> the ``New Query:`` and ``Target Sub-goals:`` lines.

    The sub-goals are listed under their own numbers (``1. ...``, ``3. ...``), so the numbers
    the model writes back are the sub-goals' (1-based in the prompt, 0-based in ``targets``;
    out-of-range and repeated numbers dropped; no ``Target Sub-goals`` line or ``NONE``: no
    targets). The query is the first line after its label, without markdown, quotes or the
    template's brackets. No ``New Query:`` line, an empty one, or the template's own
    placeholder text is a ``ParseError``: retried once, then ``fallback_query`` (the
    unsatisfied sub-goals joined), targeting the unsatisfied sub-goals.

    Speed: the published format ends with the two fields above; what a model writes after them
    is an explanation. ``STOP`` ends generation at such a label: greedy decoding writes the
    same tokens before it whether or not it stops there, so the query is unchanged and the
    explanation is never generated.
    Four stop sequences at most: the OpenAI API takes no more.
    """

    STOP: tuple[str, ...] = ("Reasoning:", "REASONING:", "Explanation:", "EXPLANATION:")

    def __init__(
        self,
        lm: LM,
        prompt: str = "compassmem/refine_query",
        max_tokens: PositiveInt = 96,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        example = first(read_fields(self.prompt.body, _FIELDS).get("query"))
        self.example = clean_value(example.splitlines()[0]).casefold() if example else ""

    def render(self, item: RefineIn) -> ChatRequest:
        goals = list(enumerate(item.subgoals))
        text = self.prompt.render(
            original_question=item.question,
            satisfied_text=numbered((i, g) for i, g in goals if item.satisfied[i]),
            unsatisfied_text=numbered((i, g) for i, g in goals if not item.satisfied[i]),
            context_so_far="\n".join(item.collected) or NO_EVIDENCE,
        )
        return self.request(text, stop=self.STOP)

    def parse(self, text: str, item: RefineIn) -> RefineOut:
        fields = read_fields(visible_text(text), _FIELDS)
        value = first(fields.get("query"))
        query = clean_value(value.splitlines()[0]) if value else ""
        if not query:
            raise ParseError("no 'New Query:' line")
        if query.casefold() == self.example:
            raise ParseError("the new query is the prompt's placeholder text")
        targets_text = first(fields.get("targets")) or ""
        numbers = [] if says_none(targets_text) else subgoal_indices(targets_text)
        targets = tuple(dict.fromkeys(i for i in numbers if 0 <= i < len(item.subgoals)))
        return RefineOut(query=query, targets=targets)

    def fallback(self, item: RefineIn, error: str) -> RefineOut:
        open_goals = tuple(i for i, done in enumerate(item.satisfied) if not done)
        return RefineOut(query=fallback_query(item), targets=open_goals, error=error)
