from memlab.stages.categorize.base import CategorizeIn, CategorizeOut, Categorizer, Category, NodeCard
from memlab.stages.categorize.clustered import ClusterCategorizer
from memlab.stages.categorize.prompted import PromptedCategorizer

__all__ = ["Categorizer", "CategorizeIn", "CategorizeOut", "Category", "ClusterCategorizer", "NodeCard",
           "PromptedCategorizer"]
