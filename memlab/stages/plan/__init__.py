from memlab.stages.plan.base import COMPLEXITY_LEVELS, PlanIn, Planner, PlanOut
from memlab.stages.plan.fixed import FixedPlanner
from memlab.stages.plan.prompted import PromptedPlanner
from memlab.stages.plan.routed import RoutedPlanner

__all__ = ["COMPLEXITY_LEVELS", "FixedPlanner", "PlanIn", "PlanOut", "Planner", "PromptedPlanner", "RoutedPlanner"]
