from memlab.stages.rerank.base import RerankIn, RerankOut, Reranker

__all__ = ["RerankIn", "RerankOut", "Reranker"]
