"""Prompted causal links as one verdict per neighbour (prompt magma/causal_verdicts).

The free-list form (``PromptedCausalConsolidator``) lets the model close the list at once,
and under greedy JSON-constrained decoding the 1.5B local model does that for every event of
a LoCoMo conversation (BENCHMARKS.md, "MAGMA's causal space"). Here the schema has one
required entry per numbered neighbour, so the model must judge each pair; the verdicts go
through the same checks (threshold delta, time order, one link per pair) and the
``max_links`` best-scored are kept.
"""

from __future__ import annotations

from typing import Literal

from memlab.bounds import NonNegativeFloat, NonNegativeInt, PositiveInt, UnitFloat
from memlab.lm.base import LM
from memlab.lm.jsonparse import object_schema, parse_json
from memlab.stages.consolidate.base import ConsolidateIn, ConsolidateOut
from memlab.stages.consolidate.prompted import PromptedCausalConsolidator

VERDICTS = ("cause", "effect", "none")


class PromptedCausalVerdicts(PromptedCausalConsolidator):
    """``{"1": {"link": "cause" | "effect" | "none", "score": s}, ...}``, one entry per
    neighbour: "cause" is a link neighbour -> event [0], "effect" is event [0] -> neighbour."""

    def __init__(
        self,
        lm: LM,
        prompt: str = "magma/causal_verdicts",
        threshold: UnitFloat = 0.5,
        max_neighbours: NonNegativeInt = 8,
        max_links: NonNegativeInt = 3,
        max_chars: PositiveInt = 300,
        max_tokens: PositiveInt = 256,
        temperature: NonNegativeFloat = 0.0,
        order: Literal["time", "hops"] = "time",
    ) -> None:
        super().__init__(lm, prompt, threshold, max_neighbours, max_links, max_chars, max_tokens, temperature, order)

    def schema(self, count: int) -> dict:
        verdict = object_schema({"link": {"type": "string", "enum": list(VERDICTS)}, "score": {"type": "number"}})
        return object_schema({str(i): verdict for i in range(1, count)})

    def parse(self, text: str, item: ConsolidateIn) -> ConsolidateOut:
        events = self.numbered(item)
        data = parse_json(text, self.schema(len(events)))
        proposed = []
        for i in range(1, len(events)):
            verdict = data[str(i)]
            if verdict["link"] == "cause":
                proposed.append((i, 0, float(verdict["score"])))
            elif verdict["link"] == "effect":
                proposed.append((0, i, float(verdict["score"])))
        out = self.kept(events, proposed)
        best = sorted(out.links, key=lambda link: link.score, reverse=True)[: self.max_links]
        return ConsolidateOut(links=tuple(best))
