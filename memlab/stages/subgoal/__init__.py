from memlab.stages.subgoal.base import SubgoalIn, SubgoalOut, SubgoalPlanner
from memlab.stages.subgoal.prompted import PromptedSubgoalPlanner

__all__ = ["PromptedSubgoalPlanner", "SubgoalIn", "SubgoalOut", "SubgoalPlanner"]
