from memlab.stages.describe.base import MAX_TAGS, DescribeIn, DescribeOut, EntityDescriber, EntityDescription, clip_tags
from memlab.stages.describe.prompted import PromptedEntityDescriber

__all__ = ["MAX_TAGS", "DescribeIn", "DescribeOut", "EntityDescriber", "EntityDescription", "PromptedEntityDescriber", "clip_tags"]
