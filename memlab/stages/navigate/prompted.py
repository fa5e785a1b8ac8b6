"""Prompted navigator: CompassMem's explorer step (section 4.3.2, Eq. 9-10) on the "Action
Decision Prompt" of appendix F.2."""

from __future__ import annotations

import re

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import visible_text
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.line_format import (
    describe_with,
    field_reader,
    first,
    label_pattern,
    node_keys,
    read_fields,
    says_none,
    subgoal_indices,
    subgoals_text,
)
from memlab.stages.navigate.base import ACTIONS, NavigateIn, NavigateOut, Navigator, checked_decision

_FIELDS = field_reader({
    "action": label_pattern("action", "decision"),
    "next": label_pattern("next nodes", "next node(s)", "next node"),
    "satisfied": label_pattern("satisfied sub goals", "satisfied sub goal", "satisfied"),
    "reasoning": label_pattern("reasoning", "reason"),
})
_ACTION = re.compile(r"\b(" + "|".join(ACTIONS) + r")\b", re.IGNORECASE)

#: What the prompt shows for an empty evidence set (the paper's own wording) and for a node
#: without neighbours (memlab's: the paper does not say).
NO_KEPT = "(No information kept yet)"
NO_NEIGHBOURS = "(none)"


def read_action(value: str) -> str:
    """The action an ``ACTION:`` value names; a ``ParseError`` for none, or for the template's
    option list copied (``[SKIP/EXPAND/ANSWER]``)."""
    found = [m.group(1).upper() for m in _ACTION.finditer(value)]
    if not found:
        raise ParseError(f"the ACTION line names none of {', '.join(ACTIONS)}")
    if len(set(found)) > 1 and re.search(r"[/|]", value):
        raise ParseError("the ACTION line copies the list of options")
    return found[0]


def first_action(values: list[str]) -> str:
    """The action of the first ``ACTION:`` value that names one (a model may copy the format's
    ``ACTION: [SKIP/EXPAND/ANSWER]`` before writing its own); else the first one's ``ParseError``."""
    errors: list[ParseError] = []
    for value in values:
        try:
            return read_action(value)
        except ParseError as e:
            errors.append(e)
    raise errors[0] if errors else ParseError("no 'ACTION:' line")


class PromptedNavigator(PromptedStage, Navigator):
    """One call per visited node on ``prompt`` ({question}, {subgoals_text}, {kept_nodes_info},
    {current_info}, {neighbor_info}).

    The prompt shows the sub-goals numbered with their status (``2. ... [SATISFIED]``), the
    kept nodes and the current node as ``EventView.describe()`` lines and each neighbour with
    its relation after its key (``N7 (causal) [7 May 2023] ...``).

    Reading the ``ACTION:``, ``NEXT_NODES:``, ``SATISFIED_SUBGOALS:`` and ``REASONING:`` fields
    (``line_format``: any case, markdown, one line or several): the action is the first of
    SKIP/EXPAND/ANSWER on its line; next nodes are neighbour keys (``N12``, ``[N12]``, ``node
    N12``, a bare ``12``; ``NONE`` for none); satisfied sub-goals are the 1-based numbers
    written, 0-based in the output. ``checked_decision`` drops keys that are not neighbours,
    out-of-range sub-goals, repeats, next nodes past ``max_next`` and, for SKIP, every
    satisfied sub-goal. A reply with no ``ACTION:`` line naming an action (only reasoning, the
    option list copied) is a ``ParseError``: retried once, then the family fallback (EXPAND,
    no next nodes, nothing satisfied).

    Speed: the format puts ``REASONING:`` after the decision fields. ``STOP`` ends generation
    there: greedy decoding writes the same tokens before it whether or not it stops, so the
    decision is unchanged and the reasoning, most of the reply, is never generated
    (``reasoning`` is then empty; it is read when a backend gives it).
    Four stop sequences at most: the OpenAI API takes no more.
    """

    STOP: tuple[str, ...] = ("REASONING:", "Reasoning:", "REASONING**:", "Reasoning**:")

    def __init__(
        self,
        lm: LM,
        prompt: str = "compassmem/action_decision",
        max_tokens: PositiveInt = 96,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)

    def render(self, item: NavigateIn) -> ChatRequest:
        text = self.prompt.render(
            question=item.question,
            subgoals_text=subgoals_text(item.subgoals, item.satisfied),
            kept_nodes_info="\n".join(view.describe() for view in item.kept) or NO_KEPT,
            current_info=item.node.describe(),
            neighbor_info="\n".join(describe_with(n.view, n.relation) for n in item.neighbours) or NO_NEIGHBOURS,
        )
        return self.request(text, stop=self.STOP)

    def parse(self, text: str, item: NavigateIn) -> NavigateOut:
        fields = read_fields(visible_text(text), _FIELDS)
        action = first_action(fields.get("action", []))
        next_text = first(fields.get("next")) or ""
        nodes = [] if says_none(next_text) else node_keys(next_text, [n.view.key for n in item.neighbours])
        satisfied_text = first(fields.get("satisfied")) or ""
        goals = [] if says_none(satisfied_text) else subgoal_indices(satisfied_text)
        reasoning = " ".join((first(fields.get("reasoning")) or "").split())
        return checked_decision(action, nodes, goals, item, reasoning)

    def fallback(self, item: NavigateIn, error: str) -> NavigateOut:
        return NavigateOut("EXPAND", error=error)
