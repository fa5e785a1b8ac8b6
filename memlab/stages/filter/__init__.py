from memlab.stages.filter.base import FilterIn, FilterOut, RelevanceFilter
from memlab.stages.filter.prompted import PromptedRelevanceFilter

__all__ = ["FilterIn", "FilterOut", "PromptedRelevanceFilter", "RelevanceFilter"]
