from memlab.stages.refine.base import QueryRefiner, RefineIn, RefineOut
from memlab.stages.refine.prompted import PromptedQueryRefiner

__all__ = ["PromptedQueryRefiner", "QueryRefiner", "RefineIn", "RefineOut"]
