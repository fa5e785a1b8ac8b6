from memlab.stages.consolidate.base import CausalLink, ConsolidateIn, ConsolidateOut, Consolidator, EventRef
from memlab.stages.consolidate.prompted import PromptedCausalConsolidator

__all__ = ["CausalLink", "ConsolidateIn", "ConsolidateOut", "Consolidator", "EventRef", "PromptedCausalConsolidator"]
