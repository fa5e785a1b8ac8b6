from memlab.stages.retrieve.base import EmbedIn, EmbedOut, TrainableEmbedder
from memlab.stages.retrieve.neural import BiEncoderEmbedder

__all__ = ["BiEncoderEmbedder", "EmbedIn", "EmbedOut", "TrainableEmbedder"]
