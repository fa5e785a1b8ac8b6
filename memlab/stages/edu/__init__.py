from memlab.stages.edu.base import EDUExtractor, grounded, validate_sources
from memlab.stages.edu.prompted import PromptedEDUExtractor

__all__ = ["EDUExtractor", "PromptedEDUExtractor", "grounded", "validate_sources"]
