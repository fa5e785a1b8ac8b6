from memlab.stages.fuse.base import EventFuser, FuseIn, FuseOut
from memlab.stages.fuse.prompted import PromptedEventFuser
from memlab.stages.fuse.rules import ClassifierFuser

__all__ = ["ClassifierFuser", "EventFuser", "FuseIn", "FuseOut", "PromptedEventFuser"]
