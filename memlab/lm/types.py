"""What goes into an LM call and what comes out: ``ChatRequest`` and ``Completion``.

Their own module, below both ``memlab.lm.base`` (the protocol, which uses the cache) and
``memlab.lm.cache`` (which stores them), so the dependency runs one way: the cache never
imports the protocol.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from memlab.lm.errors import LMError
from memlab.text import clean_text


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[dict[str, str], ...]
    temperature: float = 0.0
    max_tokens: int = 256
    #: A JSON schema the completion must follow (constrained decoding where the backend
    #: supports it; otherwise it is only a hint and the parser validates).
    json_schema: dict[str, Any] | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = 0

    @staticmethod
    def of(
        messages: list[dict[str, str]] | tuple[dict[str, str], ...] | str,
        **params: Any,
    ) -> "ChatRequest":
        """Build a request from a message list (or a single user prompt string)."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        return ChatRequest(messages=tuple(dict(m) for m in messages), **params)

    def cache_key_payload(self) -> str:
        """Canonical JSON of everything that determines the completion, for the cache key."""
        payload = asdict(self)
        payload["messages"] = [dict(m) for m in self.messages]
        return json.dumps(payload, sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class Completion:
    """One reply. ``latency_s`` is measured with ``memlab.clock.active_seconds``, so a pause
    of the process (SIGSTOP, Ctrl-Z) during the call is not counted as model time.

    ``text`` is always a ``str`` cleaned at this boundary (``memlab.text.clean_text``: no lone
    surrogate, BOM or NUL, which would crash a tokenizer or an encoder far downstream); any
    other value is an ``LMError``, so what a backend botched is never cached or parsed."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    model: str = ""
    cached: bool = False
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise LMError(f"a completion's text must be a string, got {type(self.text).__name__}: {self.text!r:.80}")
        object.__setattr__(self, "text", clean_text(self.text))
