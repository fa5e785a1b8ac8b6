from memlab.stages.temporal.base import (
    TemporalIn,
    TemporalNormalizer,
    TemporalOut,
    TimeMention,
    annotate,
    describe,
    infer_granularity,
)
from memlab.stages.temporal.prompted import PromptedTemporalNormalizer
from memlab.stages.temporal.rules import RuleTemporalNormalizer

__all__ = [
    "PromptedTemporalNormalizer",
    "RuleTemporalNormalizer",
    "TemporalIn",
    "TemporalNormalizer",
    "TemporalOut",
    "TimeMention",
    "annotate",
    "describe",
    "infer_granularity",
]
