from memlab.stages.fact.base import Fact, FactExtractor, FactIn, FactOut
from memlab.stages.fact.prompted import PromptedFactExtractor

__all__ = ["Fact", "FactExtractor", "FactIn", "FactOut", "PromptedFactExtractor"]
