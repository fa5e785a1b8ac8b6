from memlab.stages.categorize.base import Categorizer, CategorizeIn, CategorizeOut, Category, NodeCard
from memlab.stages.categorize.prompted import PromptedCategorizer

__all__ = ["Categorizer", "CategorizeIn", "CategorizeOut", "Category", "NodeCard", "PromptedCategorizer"]
