"""The "w/o intent-aware retrieval planning" ablation (SimpleMem Table 5): a fixed plan."""

from __future__ import annotations

from memlab.bounds import PositiveInt
from memlab.stages.plan.base import PlanIn, Planner, PlanOut


class FixedPlanner(Planner):
    """No LLM: the query itself for the semantic and lexical views, no symbolic constraint,
    the same ``depth`` for every query (fixed-depth retrieval)."""

    def __init__(self, depth: PositiveInt = 10) -> None:
        super().__init__()
        self.depth = depth

    def forward(self, batch: list[PlanIn]) -> list[PlanOut]:
        return [PlanOut(semantic_query=item.query, lexical_keys=(), depth=self.depth, complexity="FIXED") for item in batch]
