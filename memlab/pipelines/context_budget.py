"""The answer context's token budget: units kept, in the order given, while they fit.

A pipeline that shows units to its answerer (``RAG``, ``FullContext``) cuts them here instead of
sending a prompt the answering model cannot hold (a failed question). The budget is
``max_context_tokens`` or, when None, the answering model's context window less
``reserve_tokens`` (room for the prompt template, the question and the answer), counted with
the answering model's own tokenizer.
"""

from __future__ import annotations

from typing import Callable, Sequence

from memlab.lm.base import LM
from memlab.types import MemoryUnit

#: The window assumed for an answerer without an LM (a trained answerer): LlamaCppLM's default n_ctx.
DEFAULT_WINDOW = 4096


def answer_budget(answerer: object, max_context_tokens: int | None, reserve_tokens: int
                  ) -> tuple[Callable[[str], int], int]:
    """The answerer's token counter and the context budget (module docstring)."""
    lm = getattr(answerer, "lm", None)
    if isinstance(lm, LM):
        return lm.count_tokens, max_context_tokens or lm.context_window - reserve_tokens
    from memlab.embed import default_token_counter

    return default_token_counter(), max_context_tokens or DEFAULT_WINDOW - reserve_tokens


def fit_units(units: Sequence[MemoryUnit], count: Callable[[str], int], budget: int) -> list[MemoryUnit]:
    """The longest prefix of ``units`` whose texts, one per line, take at most ``budget`` tokens."""
    # A token covers at least one byte, so units whose bytes fit are kept without tokenizing:
    # the usual short context never loads a tokenizer (nor the model behind it, on a replay).
    if sum(len(u.text.encode("utf-8")) + 1 for u in units) <= budget:
        return list(units)
    kept: list[MemoryUnit] = []
    used = 0
    for unit in units:
        n = count(unit.text) + 1  # +1 for the newline between units
        if used + n > budget:
            break
        kept.append(unit)
        used += n
    return kept
