"""A planner driven by a router: SimpleMem's retrieval plan (2.3) without the planning LLM call.

The router (any ``IntentRouter``, e.g. a trained ``QueryRouter`` loaded from a checkpoint)
gives the query's complexity, time window and keywords; the plan is then built in code:
the query itself for the semantic view, the router's keywords for the lexical view, the
time window for the symbolic view, and the depth of the complexity (LOW -> ``min_depth``,
HIGH -> ``max_depth``, as ``PromptedPlanner``; Table 7's range [3, 20]). A router that gives
no complexity leaves ``default_complexity``.
"""

from __future__ import annotations

from datetime import datetime, time
from typing import Literal

from memlab.bounds import PositiveInt
from memlab.stages.plan.base import COMPLEXITY_LEVELS, PlanIn, Planner, PlanOut
from memlab.stages.route import IntentRouter, RouteIn


class RoutedPlanner(Planner):
    def __init__(self, router: IntentRouter, min_depth: PositiveInt = 3, max_depth: PositiveInt = 20,
                 default_complexity: Literal["LOW", "HIGH"] = "HIGH") -> None:
        super().__init__()
        if not 1 <= min_depth <= max_depth:
            raise ValueError(f"need 1 <= min_depth <= max_depth, got {min_depth}, {max_depth}")
        self.router = router
        self.min_depth = min_depth
        self.max_depth = max_depth
        self.default_complexity = default_complexity

    def forward(self, batch: list[PlanIn]) -> list[PlanOut]:
        routes = self.router([RouteIn(item.query, item.question_date) for item in batch])
        plans = []
        for item, route in zip(batch, routes):
            complexity = route.complexity if route.complexity in COMPLEXITY_LEVELS else self.default_complexity
            start = end = None
            if route.time_window is not None:
                start, end = (datetime.combine(route.time_window[0], time.min),
                              datetime.combine(route.time_window[1], time.max))
            plans.append(PlanOut(
                semantic_query=item.query, lexical_keys=route.keywords,
                depth=self.min_depth if complexity == "LOW" else self.max_depth,
                complexity=complexity, start=start, end=end, error=route.error,
            ))
        return plans
