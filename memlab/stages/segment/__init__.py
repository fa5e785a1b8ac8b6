from memlab.stages.segment.base import SegmentIn, SegmentOut, Segmenter
from memlab.stages.segment.prompted import PromptedEventSegmenter
from memlab.stages.segment.rules import TokenChunkSegmenter, TurnSegmenter

__all__ = ["PromptedEventSegmenter", "SegmentIn", "SegmentOut", "Segmenter", "TokenChunkSegmenter", "TurnSegmenter"]
