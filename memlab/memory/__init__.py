"""Memory structures: a typed multigraph, search indexes and the saved unit memory."""

from memlab.memory.graph import GraphError, MemoryGraph
from memlab.memory.index import BM25Index, IndexFileError, MetadataFilter, VectorIndex, rrf_fuse, tokenize
from memlab.memory.store import MemoryStoreError, UnitMemory

__all__ = [
    "BM25Index",
    "GraphError",
    "IndexFileError",
    "MemoryGraph",
    "MemoryStoreError",
    "MetadataFilter",
    "UnitMemory",
    "VectorIndex",
    "rrf_fuse",
    "tokenize",
]
