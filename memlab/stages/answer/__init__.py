from memlab.stages.answer.base import AnswerIn, AnswerOut, Answerer, join_context, split_context
from memlab.stages.answer.prompted import PromptedAnswerer

__all__ = ["AnswerIn", "AnswerOut", "Answerer", "PromptedAnswerer", "join_context", "split_context"]
