"""Language-model backends behind one protocol (``memlab.lm.base.LM``)."""

from memlab.lm.base import LM, ChatRequest, Completion, LMError, LMUnavailableError, ParseError, UsageMeter

__all__ = ["LM", "ChatRequest", "Completion", "LMError", "LMUnavailableError", "ParseError", "UsageMeter"]
