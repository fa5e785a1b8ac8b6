"""Prompted start-node selector: CompassMem's localization step (section 4.3.2, S_q = Psi_start(q, C_q)),
on either published selection prompt of appendix F.2."""

from __future__ import annotations

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
    label_pattern,
    node_keys,
    read_fields,
    says_none,
    subgoals_text,
)
from memlab.stages.select.base import (
    Candidate,
    NodeSelector,
    SelectIn,
    SelectOut,
    best_of_each_group,
    checked_selection,
)

_FIELDS = field_reader({
    "selected": label_pattern("selected nodes", "selected node(s)", "selected node", "selection"),
    "reasoning": label_pattern("reasoning", "reason"),
})


def candidate_line(candidate: Candidate) -> str:
    """``N3 (similarity 0.71) [7 May 2023] (Ann) summary``: the prompts ask the model to weigh
    the similarity score too ("Consider both the summary content and the similarity score")."""
    return describe_with(candidate.view, f"similarity {candidate.score:.2f}")


def nodes_text(groups: tuple[tuple[Candidate, ...], ...]) -> str:
    """The candidates, one line each; under ``Cluster 1:``, ``Cluster 2:`` ... headers when
    there is more than one group (the cluster prompt's topic clusters, in one call)."""
    groups = tuple(group for group in groups if group)
    if len(groups) == 1:
        return "\n".join(candidate_line(c) for c in groups[0])
    return "\n\n".join(f"Cluster {i}:\n" + "\n".join(candidate_line(c) for c in group)
                       for i, group in enumerate(groups, start=1))


class PromptedNodeSelector(PromptedStage, NodeSelector):
    """One call on ``prompt``: ``compassmem/select_nodes`` ("Memory Node Selection Prompt": one
    group, the dense top-k; {question}, {subgoals_text}, {nodes_text}) or
    ``compassmem/select_cluster_nodes`` ("Cluster-based Node Selection Prompt": one group per
    topic cluster, listed under ``Cluster N:`` headers; {question}, {nodes_text}).

    Reading the ``Selected Nodes:`` line (every such line, for a model that answers cluster by
    cluster): node keys as ``N12``, ``[N12]``, ``node N12`` or a bare ``12`` (``line_format.
    node_keys``), cut to the contract by ``checked_selection`` (unknown keys and repeats
    dropped, ``per_group`` per cluster, ``limit`` in all). ``NONE`` or ``[]`` is an empty
    selection. Without a ``Selected Nodes:`` line, the keys the reply names are read (bare
    numbers are not). A ``ParseError`` (retried once, then the fallback: each group's
    best-scored candidate) when the reply names no candidate at all. A batch item with no
    candidates costs no call and selects nothing.

    Speed: both formats put the explanation (``Reasoning:`` / ``Reason:``) after the
    selection. ``STOP`` ends generation there: greedy decoding writes the same tokens before it
    whether or not it stops, so the selection is unchanged and the explanation, most of the
    reply, is never generated.
    Four stop sequences at most: the OpenAI API takes no more.
    """

    STOP: tuple[str, ...] = ("Reasoning:", "REASONING:", "Reason:", "REASON:")

    def __init__(
        self,
        lm: LM,
        prompt: str = "compassmem/select_nodes",
        max_tokens: PositiveInt = 64,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)

    def render(self, item: SelectIn) -> ChatRequest:
        text = self.prompt.render(question=item.question, subgoals_text=subgoals_text(item.subgoals),
                                  nodes_text=nodes_text(item.groups))
        return self.request(text, stop=self.STOP)

    def parse(self, text: str, item: SelectIn) -> SelectOut:
        text = visible_text(text)
        keys = [c.view.key for group in item.groups for c in group]
        values = read_fields(text, _FIELDS).get("selected")
        if values is None:
            named = node_keys(text, keys, bare=False)
            if not named:
                raise ParseError("no 'Selected Nodes:' line and no node named")
        else:
            values = [value for value in values if value]
            if values and all(says_none(value) for value in values):
                return SelectOut(())
            named = [key for value in values for key in node_keys(value, keys)]
            if not named:
                raise ParseError("the 'Selected Nodes:' line names no node")
        selected = checked_selection(named, item)
        if not selected:
            raise ParseError(f"none of the selected nodes {named[:5]} is a candidate")
        return SelectOut(selected)

    def fallback(self, item: SelectIn, error: str) -> SelectOut:
        return SelectOut(best_of_each_group(item), error=error)

    def forward(self, batch: list[SelectIn]) -> list[SelectOut]:
        return self.forward_where(batch, lambda item: any(item.groups), lambda item: SelectOut(()))
