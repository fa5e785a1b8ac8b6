from memlab.stages.mention.base import MentionDetector, MentionIn, MentionOut
from memlab.stages.mention.prompted import PromptedMentionDetector
from memlab.stages.mention.rules import EntityMentionDetector

__all__ = ["EntityMentionDetector", "MentionDetector", "MentionIn", "MentionOut", "PromptedMentionDetector"]
