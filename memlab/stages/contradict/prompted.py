"""Prompted fact invalidation (Mnemis 2.1; ``mnemis/invalidate_facts`` is written by memlab:
the paper describes the step, not its prompt). One call per episode for all its new facts and
their candidate existing facts; an item with no existing fact costs no call."""

from __future__ import annotations

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import RuleBrokenError
from memlab.lm.jsonparse import object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.contradict.base import (
    Closing,
    ContradictIn,
    ContradictionDetector,
    ContradictOut,
    broken_rules,
)
from memlab.stages.extraction import one_line


def contradict_schema(n_existing: int | None = None, n_new: int | None = None) -> dict:
    """``{"closed": [{"existing": n, "new": m, "quote": "..."}]}``, numbers from 1; with the
    counts, numbers in range and at most one closing per existing fact."""
    number = {"type": "integer", "minimum": 1}
    closing = {"type": "object", "required": ["existing", "new", "quote"], "properties": {
        "existing": {**number, "maximum": n_existing} if n_existing else number,
        "new": {**number, "maximum": n_new} if n_new else number,
        "quote": {"type": "string", "maxLength": 200}}}
    closed = {"type": "array", "items": closing}
    if n_existing:
        closed["maxItems"] = n_existing
    return object_schema({"closed": closed})


class PromptedContradictionDetector(PromptedStage, ContradictionDetector):
    """One call on ``prompt`` ({existing} and {new}, each numbered from 1); the reply's numbers
    are mapped back onto indexes (numbers out of range dropped, an existing fact closed once),
    and a reply that breaks the family's rules is refused and retried (``broken_rules``).
    ``enforce_rules: false`` takes the first reply as it comes (the unguarded detector, an ablation
    row of the closure-precision check)."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "mnemis/invalidate_facts",
        max_tokens: PositiveInt = 160,
        temperature: NonNegativeFloat = 0.0,
        enforce_rules: bool = True,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.prompt = load_prompt(prompt)
        self.enforce_rules = enforce_rules

    def render(self, item: ContradictIn) -> ChatRequest:
        text = self.prompt.render(existing="\n".join(f"{i}. {f}" for i, f in enumerate(item.existing, start=1)),
                                  new="\n".join(f"{i}. {f}" for i, f in enumerate(item.new, start=1)))
        return self.request(text, json_schema=contradict_schema(len(item.existing), len(item.new)))

    def parse(self, text: str, item: ContradictIn) -> ContradictOut:
        rows = parse_json(text, contradict_schema())["closed"]
        closings: dict[int, Closing] = {}
        for row in rows:
            existing, new = row["existing"] - 1, row["new"] - 1
            if 0 <= existing < len(item.existing) and 0 <= new < len(item.new) and existing not in closings:
                closings[existing] = Closing(existing, new, one_line(row["quote"]))
        found = tuple(sorted(closings.values(), key=lambda c: c.existing))
        broken = broken_rules(item, found) if self.enforce_rules else []
        if broken:
            refused = {closing for closing, _ in broken}
            kept = () if None in refused else tuple(c for c in found if c not in refused)
            raise RuleBrokenError("; ".join(rule for _, rule in broken), salvage=ContradictOut(kept))
        return ContradictOut(found)

    def fallback(self, item: ContradictIn, error: str) -> ContradictOut:
        return ContradictOut(error=error)

    def forward(self, batch: list[ContradictIn]) -> list[ContradictOut]:
        return self.forward_where(batch, lambda item: bool(item.existing and item.new), lambda item: ContradictOut())
