from memlab.stages.answer.base import Answerer, AnswerIn, AnswerOut, clean_answer, join_context, split_context
from memlab.stages.answer.prompted import PromptedAnswerer

__all__ = ["AnswerIn", "AnswerOut", "Answerer", "PromptedAnswerer", "clean_answer", "join_context", "split_context"]
