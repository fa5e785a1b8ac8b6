from memlab.stages.rerank.base import Reranker, RerankIn, RerankOut
from memlab.stages.rerank.baselines import CosineReranker, FusionReranker
from memlab.stages.rerank.fusion import OrderFusionReranker
from memlab.stages.rerank.neural import CrossEncoderReranker
from memlab.stages.rerank.prompted import PromptedReranker

__all__ = ["CosineReranker", "CrossEncoderReranker", "FusionReranker", "OrderFusionReranker", "PromptedReranker", "RerankIn", "RerankOut",
           "Reranker"]
