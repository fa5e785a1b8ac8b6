from memlab.stages.global_select.base import GlobalSelectIn, GlobalSelector, GlobalSelectOut, HierarchyNode, Selection
from memlab.stages.global_select.neural import SelectionTarget, TrainedGlobalSelector
from memlab.stages.global_select.prompted import PromptedGlobalSelector

__all__ = ["GlobalSelectIn", "GlobalSelectOut", "GlobalSelector", "HierarchyNode", "PromptedGlobalSelector",
           "Selection", "SelectionTarget", "TrainedGlobalSelector"]
