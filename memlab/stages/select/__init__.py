from memlab.stages.select.base import Candidate, NodeSelector, SelectIn, SelectOut
from memlab.stages.select.prompted import PromptedNodeSelector

__all__ = ["Candidate", "NodeSelector", "PromptedNodeSelector", "SelectIn", "SelectOut"]
