from memlab.stages.fuse.base import EventFuser, FuseIn, FuseOut
from memlab.stages.fuse.prompted import PromptedEventFuser

__all__ = ["EventFuser", "FuseIn", "FuseOut", "PromptedEventFuser"]
