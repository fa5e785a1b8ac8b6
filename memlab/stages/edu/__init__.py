from memlab.stages.edu.base import EDUExtractor, grounded, validate_sources
from memlab.stages.edu.chunked import StructuredChunkEDUExtractor, split_blocks
from memlab.stages.edu.prompted import PromptedEDUExtractor

__all__ = [
    "EDUExtractor",
    "PromptedEDUExtractor",
    "StructuredChunkEDUExtractor",
    "grounded",
    "split_blocks",
    "validate_sources",
]
