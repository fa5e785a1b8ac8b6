"""Greedy decoding under a JSON-schema grammar, checking the greedy token first.

llama-cpp-python puts llama.cpp's grammar sampler in the sampling chain, and that sampler
tests every vocabulary entry against the grammar at every step (~150k entries for Qwen2.5):
on 2 CPU cores this costs about as much as the forward pass itself. Under greedy decoding
the token chosen is the highest-logit token the grammar allows, so it is enough to test the
highest-logit token alone and to mask the whole vocabulary only when the grammar rejects
it (llama.cpp's own ``common_sampler`` does the same). ``GreedyGrammarProcessor`` is that
check as a llama-cpp-python logits processor: the output is the one the full grammar sampler
gives from the same model state, 1.4-2.3 times as fast to produce on 2 cores, more for larger
grammars (BENCHMARKS.md, "Local LLM speed").
"""

from __future__ import annotations

import ctypes
import json
from typing import Any

import numpy as np

_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)


class GreedyGrammarProcessor:
    """A logits processor for one greedy completion under ``schema``'s grammar.

    Called once per generated token with every token so far and the next-token logits, it
    returns logits where only the greedy token allowed by the grammar is finite. It feeds the
    grammar the tokens generated since its last call, so one instance serves one completion;
    ``close`` frees the grammar. Raises ``ValueError`` when the schema gives no grammar
    llama.cpp accepts (the caller then uses the full grammar sampler).
    """

    def __init__(self, llm: Any, schema: dict[str, Any]) -> None:
        import llama_cpp
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        self._api = llama_cpp
        try:
            gbnf = json_schema_to_gbnf(json.dumps(schema))
        except Exception as exc:  # the converter raises bare Exceptions on schemas it lacks
            raise ValueError(f"no grammar for this JSON schema: {exc}") from None
        self._grammar = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode("utf-8"), b"root")
        if not self._grammar:
            raise ValueError("llama.cpp rejected the grammar compiled from this JSON schema")
        self._seen: int | None = None  # tokens (prompt + generated) the grammar has been given
        self._one = (llama_cpp.llama_token_data * 1)()
        self._one_array = llama_cpp.llama_token_data_array(self._one, 1, -1, False)
        self._full: Any = None
        self.checked = 0  # steps where the greedy token was allowed
        self.masked = 0   # steps that needed the whole vocabulary masked

    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        api = self._api
        if self._seen is None:
            self._seen = len(input_ids)  # the prompt: not grammar-constrained
        for token in input_ids[self._seen:]:
            api.llama_sampler_accept(self._grammar, int(token))
        self._seen = len(input_ids)

        best = int(np.argmax(logits))
        self._one[0].id, self._one[0].logit, self._one[0].p = best, float(logits[best]), 0.0
        self._one_array.size, self._one_array.selected, self._one_array.sorted = 1, -1, False
        api.llama_sampler_apply(self._grammar, ctypes.byref(self._one_array))
        if np.isfinite(self._one[0].logit):
            self.checked += 1
            allowed = np.full_like(logits, -np.inf)
            allowed[best] = logits[best]
            return allowed

        self.masked += 1
        if self._full is None:
            self._full = (api.llama_token_data * len(logits))()
            self._full_view = np.ctypeslib.as_array(self._full).view(_TOKEN_DATA)
        self._full_view["id"] = np.arange(len(logits), dtype=np.intc)
        self._full_view["logit"] = logits
        self._full_view["p"] = 0.0
        array = api.llama_token_data_array(self._full, len(logits), -1, False)
        api.llama_sampler_apply(self._grammar, ctypes.byref(array))  # disallowed -> -inf, in place
        return self._full_view["logit"].copy()

    def close(self) -> None:
        if self._grammar:
            self._api.llama_sampler_free(self._grammar)
            self._grammar = None
