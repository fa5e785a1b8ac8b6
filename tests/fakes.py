"""Test doubles shared by the test suite.

``ReplayLM`` is for control-flow tests only (parsing, retries, batching, voting): it
replays scripted completions and records the requests it got. Tests of what a model
actually does use a real local model.
"""

from __future__ import annotations

from typing import Callable, Sequence

from memlab.lm.base import LM
from memlab.lm.types import ChatRequest, Completion
from memlab.stages.event import EventExtractor, EventIn, EventOut


class ReplayLM(LM):
    """An LM that replays scripted completions, with no cache.

    ``script`` is either a sequence of completion texts, consumed in order across all
    ``generate`` calls (running out is an ``AssertionError``), or a function from the
    request to the completion text. Every request is appended to ``requests``.
    """

    def __init__(self, script: Sequence[str] | Callable[[ChatRequest], str], name: str = "replay") -> None:
        super().__init__(cache=None)
        self._respond = script if callable(script) else None
        self._queue = [] if callable(script) else list(script)
        self._name = name
        self.requests: list[ChatRequest] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def remaining(self) -> int:
        """Scripted completions not yet replayed."""
        return len(self._queue)

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        completions = []
        for request in requests:
            self.requests.append(request)
            if self._respond is not None:
                text = self._respond(request)
            else:
                if not self._queue:
                    raise AssertionError(f"ReplayLM: no scripted completion left for request #{len(self.requests)}")
                text = self._queue.pop(0)
            prompt = "\n".join(message["content"] for message in request.messages)
            completions.append(
                Completion(
                    text=text,
                    prompt_tokens=self.count_tokens(prompt),
                    completion_tokens=self.count_tokens(text),
                    latency_s=0.0,
                    model=self._name,
                )
            )
        return completions


class CallbackEventExtractor(EventExtractor):
    """An event extractor that calls ``callback(item)`` per utterance and extracts nothing:
    a slow-path step whose timing a test controls."""

    def __init__(self, callback: Callable[[EventIn], object]) -> None:
        super().__init__()
        self.callback = callback

    def forward(self, batch: list[EventIn]) -> list[EventOut]:
        for item in batch:
            self.callback(item)
        return [EventOut() for _ in batch]
