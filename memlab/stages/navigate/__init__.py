from memlab.stages.navigate.base import ACTIONS, NavigateIn, NavigateOut, Navigator, Neighbour
from memlab.stages.navigate.prompted import PromptedNavigator

__all__ = ["ACTIONS", "NavigateIn", "NavigateOut", "Navigator", "Neighbour", "PromptedNavigator"]
