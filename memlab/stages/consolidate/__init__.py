from memlab.stages.consolidate.base import CausalLink, ConsolidateIn, ConsolidateOut, Consolidator, EventRef
from memlab.stages.consolidate.classifier import ClassifierCausalConsolidator
from memlab.stages.consolidate.prompted import PromptedCausalConsolidator
from memlab.stages.consolidate.verdicts import PromptedCausalVerdicts

__all__ = ["CausalLink", "ClassifierCausalConsolidator", "ConsolidateIn", "ConsolidateOut", "Consolidator", "EventRef",
           "PromptedCausalConsolidator", "PromptedCausalVerdicts"]
