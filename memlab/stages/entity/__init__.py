from memlab.stages.entity.base import EntityExtractor, EntityIn, EntityOut
from memlab.stages.entity.prompted import PromptedEntityExtractor

__all__ = ["EntityExtractor", "EntityIn", "EntityOut", "PromptedEntityExtractor"]
