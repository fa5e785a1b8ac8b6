"""The language-model protocol every backend implements.

Contract
--------
* ``LM.generate(requests) -> completions`` takes a *batch* of ``ChatRequest`` (messages,
  temperature, max_tokens, optional JSON schema, stop strings) and returns one ``Completion``
  per request, in order, each with prompt/completion token counts and latency.
* Backends implement only ``_generate`` (the uncached batch call) and ``name`` (the model
  identity that keys the response cache). ``generate`` adds, for every backend alike:
  the response cache (``memlab.lm.cache.ResponseCache``: a hit costs no model call and is
  bit-identical across reruns) and usage accounting (``LM.usage``, a ``UsageMeter`` the
  pipeline and the evaluator read).
* Loading is lazy: constructing an LM loads nothing; the first ``generate`` (or an explicit
  ``warm_up()``) does. So a pipeline that never calls its LM never loads it.
* A backend that cannot answer (server down after its retries, model file missing) raises
  ``LMUnavailableError`` with a message naming the problem; one that refuses a single
  request (HTTP 400, a prompt over the context window) raises ``RequestError``, which a
  prompted stage counts as that call's failure. A reply that is not a completion (a server's
  non-string ``content``, a ``null`` message) is never made into a ``Completion`` (whose text
  is always a cleaned ``str``), so it is never cached nor replayed.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlab.components import CheckedArguments
from memlab.lm.errors import LMError
from memlab.lm.types import ChatRequest, Completion


@dataclass
class UsageMeter:
    """Thread-safe counters of LLM use. Read with ``snapshot()``; diff two snapshots to get
    the usage of a phase (memory building, one query).

    ``latency_s`` is the model time of this run's uncached calls; ``llm_seconds`` adds the
    time the cached calls took when they were made, i.e. the phase's model time from a cold
    cache, which a run resumed through the cache would otherwise under-report."""

    llm_calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    llm_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, completion: Completion) -> None:
        self._add(completion, 1)

    def forget(self, completion: Completion) -> None:
        """Take back a ``record``: a failed batch's finished rounds, which the caller's retry
        gets from the cache and records once more."""
        self._add(completion, -1)

    def _add(self, completion: Completion, sign: int) -> None:
        with self._lock:
            if completion.cached:
                self.cached_calls += sign
            else:
                self.llm_calls += sign
                self.latency_s += sign * completion.latency_s
            self.llm_seconds += sign * completion.latency_s
            # Tokens are counted for cached calls too: they measure the method's cost,
            # which must not depend on whether the cache was warm.
            self.prompt_tokens += sign * completion.prompt_tokens
            self.completion_tokens += sign * completion.completion_tokens

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {
                "llm_calls": self.llm_calls + self.cached_calls,
                "uncached_calls": self.llm_calls,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "latency_s": self.latency_s,
                "llm_seconds": self.llm_seconds,
            }

    @staticmethod
    def diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
        return {k: after[k] - before.get(k, 0) for k in after}


class LM(CheckedArguments, ABC):
    """Base class of language-model backends (see the module docstring for the contract).

    ``cache``: path of the SQLite response cache, ``"default"`` for the user cache folder
    (``$MEMLAB_CACHE`` or ``~/.cache/memlab/responses.sqlite``), or None to disable it.
    """

    #: Context window in tokens, used by pipelines to truncate their inputs.
    context_window: int = 4096

    def __init__(self, cache: str | None = "default") -> None:
        self.usage = UsageMeter()
        self._cache_path = cache
        self._cache = None

    @property
    def requests_at_once(self) -> int:
        """How many requests ``_generate`` runs together. ``generate`` hands it the uncached
        requests that many at a time and caches each round's completions before the next,
        so an interrupted run loses at most one round of calls, not a whole batch."""
        return 1

    @property
    @abstractmethod
    def name(self) -> str:
        """Model identity (backend + model + anything that changes outputs); keys the cache."""

    @abstractmethod
    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        """Run the model on every request (no cache). Must return one completion per request."""

    def warm_up(self) -> None:
        """Load the model now instead of on first use."""

    def close(self) -> None:
        """Free the model now (it loads again on the next call); nothing to free by default. A run
        closes its LMs when it ends: llama.cpp frees a model noisily if left to interpreter shutdown."""

    @property
    def trained_weights(self) -> Path | None:
        """The folder of weights this LM learnt on top of its published model (a LoRA adapter);
        None for a published model. Its recipe's ``training.json`` says what they learnt from."""
        return None

    @property
    def trained_on(self) -> frozenset[str]:
        """The conversations ``trained_weights`` were trained or validated on (``training.json``'s
        split); ``memlab.held_out.trained_conversations`` sees them through the stage that holds the LM."""
        return frozenset()

    def runtime(self) -> dict[str, Any]:
        """What runs this LM's calls where it runs, for a run's record of its timings (a local
        backend's build and threads); nothing that changes outputs, which ``name`` holds."""
        return {}

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` for this model; backends with a tokenizer override this."""
        return max(1, len(text) // 4)

    @property
    def cache_path(self) -> str | None:
        """Where this LM's response cache lives (``"default"``: memlab's cache file; None: no cache)."""
        return self._cache_path

    @property
    def cache(self):
        if self._cache is None and self._cache_path is not None:
            from memlab.lm.cache import ResponseCache

            self._cache = ResponseCache.open(self._cache_path)
        return self._cache

    def use_cache(self, cache) -> None:
        """Read and write ``cache`` (a ``ResponseCache`` or ``AsideCache``) from now on instead of
        the one ``cache_path`` names: a worker of a parallel run writes beside the shared cache."""
        if self._cache_path is None:
            raise ValueError(f"{self.name} runs without a response cache (cache=None): it has none to replace")
        self._cache = cache

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        results: list[Completion | None] = [None] * len(requests)
        cache = self.cache
        missing: list[int] = []
        for i, request in enumerate(requests):
            hit = cache.get(self.name, request) if cache is not None else None
            if hit is not None:
                results[i] = hit
            else:
                missing.append(i)
        # Metered as each round ends, so a long batch's progress shows while it runs; a batch that
        # fails takes its counts back, since a caller that asks again gets them from the cache.
        counted = [c for c in results if c is not None]
        for completion in counted:
            self.usage.record(completion)
        step = max(1, self.requests_at_once)
        try:
            for start in range(0, len(missing), step):
                round_ = missing[start:start + step]
                fresh = self._generate([requests[i] for i in round_])
                if len(fresh) != len(round_):
                    raise LMError(f"{self.name}: backend returned {len(fresh)} completions for {len(round_)} requests")
                for i, completion in zip(round_, fresh):
                    results[i] = completion
                    if cache is not None:
                        cache.put(self.name, requests[i], completion)
                    self.usage.record(completion)
                    counted.append(completion)
        except BaseException:
            for completion in counted:
                self.usage.forget(completion)
            raise
        return results  # type: ignore[return-value]

    def complete(self, prompt: str, **params: Any) -> str:
        """Convenience: one user prompt in, text out."""
        return self.generate([ChatRequest.of(prompt, **params)])[0].text
