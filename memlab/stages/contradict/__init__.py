from memlab.stages.contradict.base import Closing, ContradictIn, ContradictionDetector, ContradictOut
from memlab.stages.contradict.prompted import PromptedContradictionDetector

__all__ = ["Closing", "ContradictIn", "ContradictOut", "ContradictionDetector", "PromptedContradictionDetector"]
