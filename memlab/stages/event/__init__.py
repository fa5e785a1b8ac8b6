from memlab.stages.event.base import EventExtractor, EventIn, EventOut
from memlab.stages.event.prompted import PromptedEventExtractor, event_schema

__all__ = ["EventExtractor", "EventIn", "EventOut", "PromptedEventExtractor", "event_schema"]
