from memlab.stages.answer.base import AnswerIn, AnswerOut, Answerer
from memlab.stages.answer.prompted import PromptedAnswerer

__all__ = ["AnswerIn", "AnswerOut", "Answerer", "PromptedAnswerer"]
