"""Language-model backends behind one protocol (``memlab.lm.base.LM``)."""

from memlab.lm.base import LM, UsageMeter
from memlab.lm.cache import CacheEntry, CacheError, ResponseCache
from memlab.lm.errors import (
                              AmbiguousReplyError,
                              LMError,
                              LMUnavailableError,
                              ParseError,
                              PromptTooLongError,
                              RequestError,
)
from memlab.lm.hf import HFLM
from memlab.lm.jsonparse import list_schema, object_schema, parse_json
from memlab.lm.llamacpp import LlamaCppLM
from memlab.lm.models import DEFAULT_MODEL, KNOWN_MODELS, model_status, resolve_model
from memlab.lm.openai_compat import OpenAICompatLM
from memlab.lm.types import ChatRequest, Completion

__all__ = [
    "LM",
    "ChatRequest",
    "Completion",
    "LMError",
    "LMUnavailableError",
    "ParseError",
    "UsageMeter",
    "CacheEntry",
    "CacheError",
    "ResponseCache",
    "HFLM",
    "LlamaCppLM",
    "OpenAICompatLM",
    "PromptTooLongError",
    "RequestError",
    "AmbiguousReplyError",
    "DEFAULT_MODEL",
    "KNOWN_MODELS",
    "model_status",
    "resolve_model",
    "list_schema",
    "object_schema",
    "parse_json",
]
