from memlab.stages.contradict.base import ContradictIn, ContradictionDetector, ContradictOut
from memlab.stages.contradict.prompted import PromptedContradictionDetector

__all__ = ["ContradictIn", "ContradictOut", "ContradictionDetector", "PromptedContradictionDetector"]
