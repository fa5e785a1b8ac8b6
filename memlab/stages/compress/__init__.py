from memlab.stages.compress.base import (
    SALIENCE_LEVELS,
    CompressIn,
    Compressor,
    CompressOut,
    parse_timestamp,
    sliding_windows,
)
from memlab.stages.compress.chunks import ChunkCompressor
from memlab.stages.compress.prompted import PromptedCompressor

__all__ = [
    "SALIENCE_LEVELS",
    "ChunkCompressor",
    "CompressIn",
    "CompressOut",
    "Compressor",
    "PromptedCompressor",
    "parse_timestamp",
    "sliding_windows",
]
