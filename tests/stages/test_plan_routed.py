from datetime import date, datetime

from memlab.stages.plan import PlanIn, RoutedPlanner
from memlab.stages.route import IntentRouter, RouteIn, RouteOut, RuleRouter
from memlab.stages.temporal import RuleTemporalNormalizer


class ComplexityRouter(IntentRouter):
    """Says LOW for questions starting with 'What', HIGH otherwise (a stand-in for a trained router)."""

    def forward(self, batch: list[RouteIn]) -> list[RouteOut]:
        return [RouteOut(intent="ENTITY", complexity="LOW" if item.question.startswith("What") else "HIGH",
                         time_window=(date(2023, 5, 1), date(2023, 5, 31)), keywords=("hiking",))
                for item in batch]


def test_depth_follows_the_routers_complexity_and_window_becomes_the_range():
    planner = RoutedPlanner(ComplexityRouter(), min_depth=3, max_depth=20)
    low, high = planner([PlanIn("What did she buy?"), PlanIn("Would he enjoy hiking?")])
    assert (low.complexity, low.depth, high.complexity, high.depth) == ("LOW", 3, "HIGH", 20)
    assert low.semantic_query == "What did she buy?" and low.lexical_keys == ("hiking",)
    assert low.start == datetime(2023, 5, 1) and low.end.date() == date(2023, 5, 31) and low.end.hour == 23


def test_a_router_without_complexity_gets_the_default():
    plan = RoutedPlanner(RuleRouter(normalizer=RuleTemporalNormalizer()), default_complexity="LOW").run_one(
        PlanIn("When did Priya go hiking last week?", datetime(2023, 5, 20)))
    assert plan.complexity == "LOW" and plan.depth == 3
    assert plan.start is not None and plan.start <= plan.end
