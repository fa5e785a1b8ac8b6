from memlab.stages.segment.base import Segmenter, SegmentIn, SegmentOut
from memlab.stages.segment.neural import BoundarySegmenter, FixedSpanSegmenter, SpanSegmenter, WindowBoundarySegmenter
from memlab.stages.segment.prompted import PromptedEventSegmenter
from memlab.stages.segment.rules import TokenChunkSegmenter, TurnSegmenter

__all__ = ["BoundarySegmenter", "FixedSpanSegmenter", "PromptedEventSegmenter", "SegmentIn", "SegmentOut", "Segmenter",
           "SpanSegmenter", "TokenChunkSegmenter", "TurnSegmenter",
           "WindowBoundarySegmenter"]
