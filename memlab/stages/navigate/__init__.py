from memlab.stages.navigate.base import ACTIONS, NavigateIn, NavigateOut, Navigator, Neighbour
from memlab.stages.navigate.neural import ExplorerLogits, ExplorerPolicy, ExplorerTarget
from memlab.stages.navigate.prompted import PromptedNavigator

__all__ = ["ACTIONS", "ExplorerLogits", "ExplorerPolicy", "ExplorerTarget", "NavigateIn", "NavigateOut", "Navigator",
           "Neighbour", "PromptedNavigator"]
