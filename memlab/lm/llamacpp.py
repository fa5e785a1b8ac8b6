"""In-process GGUF models through llama-cpp-python (the default local backend).

One ``llama_cpp.Llama`` per ``LlamaCppLM``, loaded on first use (or ``warm_up``), behind a
lock: requests run one at a time, so a background thread (MAGMA's slow path) and the
foreground query loop can share one instance. A request with ``json_schema`` is decoded
under the grammar llama.cpp compiles from the schema, so the output follows it (a
completion cut off by ``max_tokens`` can still be unfinished JSON; the parser repairs it);
greedy requests (temperature 0) check the greedy token against the grammar before masking
the vocabulary (``memlab.lm.grammar``; ``fast_grammar=False`` masks at every step, same output).

llama.cpp reuses the KV cache of the previous prompt's common prefix. Logits computed that
way can differ in the last bits from a fresh evaluation, so a request's greedy completion
can depend on the request before it; memlab's response cache is what makes runs repeatable.

``n_threads`` defaults to every core this process may run on (``available_cores``), not
llama.cpp's half of them: on the idle 2-core development machine the 1.5B model generated
15.1 tokens/s with 2 threads against 8.2 with llama.cpp's 1 (``eval/llm_speed.py --threads
1,2``; BENCHMARKS.md, "Local LLM speed"); prompt evaluation already used every core. Beside
another busy process, two threads wait on each other: pass ``n_threads=1`` there. Greedy output is the same whatever the thread count (a
test checks it), so the response cache stays valid.

Sampling settings other than the request's (top-p/top-k/min-p/repeat penalty) are fixed and
part of ``name``, as are the model file's identity and the seed; ``n_ctx``, ``n_threads`` and
``n_batch`` are not, since they do not change what the model writes.

A prompt that does not fit ``n_ctx`` is refused with ``PromptTooLongError`` (nothing is
truncated silently). If prompt + ``max_tokens`` exceeds ``n_ctx``, llama.cpp stops at the
context end and the completion's ``finish_reason`` is ``"length"``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from memlab.bounds import PositiveInt
from memlab.clock import active_seconds
from memlab.lm.base import LM
from memlab.lm.errors import LMUnavailableError, PromptTooLongError, RequestError
from memlab.lm.grammar import GreedyGrammarProcessor
from memlab.lm.models import DEFAULT_MODEL, KNOWN_MODELS, model_fingerprint, resolve_model
from memlab.lm.types import ChatRequest, Completion

#: Sampling settings not carried by ``ChatRequest``; changing them changes ``name``.
SAMPLING = {"top_p": 0.95, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.0}
_SAMPLING_TAG = "p0.95-k40-m0.05-r1.0"


def _model_label(model: str) -> str:
    return model if model in KNOWN_MODELS else os.path.basename(model)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


class LlamaCppLM(LM):
    """A GGUF model run in-process by llama.cpp (see the module docstring).

    ``model``: a known model name (``memlab.lm.models.KNOWN_MODELS``) or a path to a .gguf.
    ``n_threads``: None uses ``available_cores()`` (module docstring). ``seed``: used by requests whose seed is None.
    ``fast_grammar``: see the module docstring.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        n_ctx: PositiveInt = 4096,
        n_threads: PositiveInt | None = None,
        n_batch: PositiveInt = 512,
        seed: int = 0,
        cache: str | None = "default",
        verbose: bool = False,
        fast_grammar: bool = True,
    ) -> None:
        super().__init__(cache=cache)
        self.model = model
        self.n_ctx = n_ctx
        self.n_threads = n_threads or available_cores()
        self.n_batch = n_batch
        self.seed = seed
        self.verbose = verbose
        self.fast_grammar = fast_grammar
        self.context_window = n_ctx
        self.load_time_s: float | None = None
        self._llm: Any = None
        self._name: str | None = None
        self._lock = threading.RLock()  # one model instance: loading and decoding are serialised

    @property
    def name(self) -> str:
        if self._name is None:
            self._name = f"llamacpp:{_model_label(self.model)}@{model_fingerprint(self.model)}:{_SAMPLING_TAG}:s{self.seed}"
        return self._name

    def warm_up(self) -> None:
        self._load()

    def _load(self) -> Any:
        with self._lock:
            if self._llm is not None:
                return self._llm
            try:
                from llama_cpp import Llama
            except ImportError:
                raise LMUnavailableError(
                    "LlamaCppLM needs llama-cpp-python: pip install 'llama-cpp-python[server]'"
                ) from None
            path = resolve_model(self.model)
            start = active_seconds()
            try:
                self._llm = Llama(
                    model_path=str(path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    n_batch=self.n_batch,
                    seed=self.seed,
                    verbose=self.verbose,
                )
            except (ValueError, RuntimeError, OSError) as exc:
                raise LMUnavailableError(f"llama.cpp could not load the model file {path}: {exc}") from None
            self.load_time_s = active_seconds() - start
            return self._llm

    def runtime(self) -> dict[str, Any]:
        """llama.cpp's version and the CPU features it was built for (an AVX2 and an AVX-512
        build of the same version differ 1.46x in prompt speed: BENCHMARKS.md, "Local LLM speed")."""
        runtime: dict[str, Any] = {"backend": "llama.cpp", "n_threads": self.n_threads, "llama_cpp_python": None}
        try:
            import llama_cpp
        except ImportError:
            return runtime
        features = llama_cpp.llama_print_system_info()  # bytes from the C library
        if isinstance(features, bytes):
            features = features.decode(errors="replace")
        return {**runtime, "llama_cpp_python": llama_cpp.__version__, "built_for": features.strip(" |")}

    def count_tokens(self, text: str) -> int:
        llm = self._load()
        # Tokenizing reads only the vocabulary, which llama.cpp never mutates: no lock, so
        # counting does not wait for a long generation in another thread.
        return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        llm = self._load()
        return [self._one(llm, request) for request in requests]

    def _one(self, llm: Any, request: ChatRequest) -> Completion:
        kwargs: dict[str, Any] = {
            "messages": [dict(m) for m in request.messages],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            "stop": list(request.stop) or None,
            "seed": self.seed if request.seed is None else request.seed,
            **SAMPLING,
        }
        with self._lock:
            processor = self._grammar_processor(llm, request)
            if processor is not None:
                kwargs["logits_processor"] = [processor]
            elif request.json_schema is not None:
                kwargs["response_format"] = {"type": "json_object", "schema": request.json_schema}
            start = active_seconds()
            try:
                response = llm.create_chat_completion(**kwargs)
            except ValueError as exc:
                if "exceed context window" in str(exc):
                    raise PromptTooLongError(
                        f"{self.name}: the prompt does not fit the context window ({exc}); "
                        "shorten the input or raise n_ctx"
                    ) from None
                raise RequestError(f"{self.name}: llama.cpp rejected the request: {exc}") from None
            finally:
                if processor is not None:
                    processor.close()
            latency = active_seconds() - start
        choice = response["choices"][0]
        usage = response.get("usage") or {}
        return Completion(
            text=choice["message"].get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            latency_s=latency,
            model=self.name,
            finish_reason=choice.get("finish_reason"),
        )

    def _grammar_processor(self, llm: Any, request: ChatRequest) -> GreedyGrammarProcessor | None:
        """The fast grammar check for a greedy request with a schema; None otherwise, or when
        the schema gives no grammar (llama-cpp-python then falls back to plain JSON)."""
        if not self.fast_grammar or request.json_schema is None or request.temperature != 0:
            return None
        try:
            return GreedyGrammarProcessor(llm, request.json_schema)
        except ValueError:
            return None

    def close(self) -> None:
        """Free the model (it is loaded again on the next call)."""
        with self._lock:
            if self._llm is not None:
                self._llm.close()
                self._llm = None

    def __repr__(self) -> str:
        return f"LlamaCppLM(model={self.model!r}, n_ctx={self.n_ctx})"
