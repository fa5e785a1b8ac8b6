from memlab.stages.arguments.base import ArgumentExtractor, ArgumentIn, ArgumentOut, EventFrame, normalize_argument
from memlab.stages.arguments.prompted import PromptedArgumentExtractor

__all__ = ["ArgumentExtractor", "ArgumentIn", "ArgumentOut", "EventFrame", "PromptedArgumentExtractor", "normalize_argument"]
