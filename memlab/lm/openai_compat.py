"""Served models over the OpenAI chat-completions HTTP API (OpenAI, vLLM, SGLang, llama.cpp).

* The requests of a batch are sent concurrently, at most ``max_concurrency`` at a time.
* Connection errors, timeouts, HTTP 429 and 5xx are retried with exponential backoff
  (``backoff_s * 2**attempt``, plus up to 25 % jitter; a ``Retry-After`` header is honoured
  up to 60 s). After the last retry ``LMUnavailableError`` names the URL and the last error.
  A body that is not a chat completion (not JSON, no ``choices``, a ``null`` message, a
  ``content`` that is a number or a list) is retried the same way: it is never made into a
  ``Completion``, so never cached. ``content: null`` (a refusal, or reasoning cut off) is an
  empty reply. Any other 4xx fails at once with the server's message (401/403/404 as
  ``LMUnavailableError``: wrong key, URL or model name; others as ``RequestError``: this
  request was refused, and the prompted stage counts it as its call's failure).
* ``json_mode`` says how a request's JSON schema is sent, because servers differ:
  ``"json_schema"`` (OpenAI, vLLM, SGLang, llama.cpp's C++ ``llama-server``):
  ``{"type": "json_schema", "json_schema": {"name": ..., "schema": ...}}``;
  ``"json_object"`` (llama-cpp-python's ``llama_cpp.server``, which rejects the former):
  ``{"type": "json_object", "schema": ...}``; ``"none"``: the schema is not sent (the
  parser still validates).
"""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import requests

from memlab.bounds import NonNegativeFloat, NonNegativeInt, PositiveInt
from memlab.clock import active_seconds
from memlab.lm.base import LM
from memlab.lm.errors import LMUnavailableError, RequestError
from memlab.lm.types import ChatRequest, Completion

_RETRY_AFTER_CAP_S = 60.0


class _Retryable(Exception):
    """A failure worth another attempt (its message is what the user sees at the end)."""


class OpenAICompatLM(LM):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint (see module docstring).

    ``api_key``: the key itself, ``"$NAME"`` to read it from environment variable NAME (so
    configs hold no secrets), or None to send no Authorization header.
    ``context_window``: the served model's context length, for pipelines that truncate.
    """

    def __init__(
        self,
        model: str,
        base_url: str = "http://127.0.0.1:8000/v1",
        api_key: str | None = None,
        timeout_s: NonNegativeFloat = 120.0,
        max_retries: NonNegativeInt = 4,
        backoff_s: NonNegativeFloat = 1.0,
        max_concurrency: PositiveInt = 4,
        json_mode: Literal["json_schema", "json_object", "none"] = "json_schema",
        context_window: PositiveInt = 8192,
        cache: str | None = "default",
    ) -> None:
        super().__init__(cache=cache)
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_concurrency = max_concurrency
        self.json_mode = json_mode
        self.context_window = context_window
        self._api_key = _resolve_api_key(api_key)
        self._local = threading.local()  # one requests.Session per worker thread

    @property
    def name(self) -> str:
        # The URL is not part of the identity: the same model behind another host or port
        # writes the same text. How the schema is sent changes the output, so it is.
        return f"openai-compat:{self.model}:json={self.json_mode}"

    def runtime(self) -> dict[str, Any]:
        """The server the calls went to and how many at once: its timings are that server's."""
        return {"backend": "openai-compatible server", "base_url": self.base_url, "max_concurrency": self.max_concurrency}

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in request.messages],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
        }
        if request.stop:
            body["stop"] = list(request.stop)
        if request.seed is not None:
            body["seed"] = request.seed
        if request.json_schema is not None and self.json_mode == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.json_schema.get("title", "response"), "schema": request.json_schema},
            }
        elif request.json_schema is not None and self.json_mode == "json_object":
            body["response_format"] = {"type": "json_object", "schema": request.json_schema}
        return body

    @property
    def requests_at_once(self) -> int:
        return self.max_concurrency

    def _generate(self, requests_: list[ChatRequest]) -> list[Completion]:
        if len(requests_) <= 1 or self.max_concurrency == 1:
            return [self._send(r) for r in requests_]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(requests_))) as pool:
            return list(pool.map(self._send, requests_))

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            if self._api_key:
                session.headers["Authorization"] = f"Bearer {self._api_key}"
            self._local.session = session
        return session

    def _send(self, request: ChatRequest) -> Completion:
        body = self.payload(request)
        start = active_seconds()
        last_error = "no attempt was made"
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self._delay(attempt - 1, last_error))
            try:
                data = self._post(body)
            except _Retryable as exc:
                last_error = str(exc)
                continue
            return self._completion(data, request, active_seconds() - start)
        raise LMUnavailableError(
            f"{self.url} did not answer after {self.max_retries + 1} attempt(s); last error: {last_error}"
        )

    def _delay(self, attempt: int, last_error: str) -> float:
        delay = self.backoff_s * (2**attempt)
        retry_after = getattr(self._local, "retry_after", None)
        if retry_after is not None:
            self._local.retry_after = None
            delay = max(delay, min(retry_after, _RETRY_AFTER_CAP_S))
        return delay * (1.0 + 0.25 * random.random())

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self._session().post(self.url, json=body, timeout=self.timeout_s)
        except requests.Timeout:
            raise _Retryable(f"timed out after {self.timeout_s:g} s") from None
        except requests.ConnectionError as exc:
            raise _Retryable(f"connection failed ({_short(exc)})") from None
        status = response.status_code
        if status == 429 or status >= 500:
            self._local.retry_after = _retry_after(response)
            raise _Retryable(f"HTTP {status}: {_server_message(response)}")
        if status >= 400:
            message = f"{self.url} refused the request with HTTP {status}: {_server_message(response)}"
            if status in (401, 403, 404):
                raise LMUnavailableError(message)
            raise RequestError(message)
        try:
            data = response.json()
            message = data["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise _Retryable(f"malformed response body: {response.text[:200]!r}") from None
        if not isinstance(message, dict) or not isinstance(message.get("content"), (str, type(None))):
            raise _Retryable(f"malformed response body: the message is not one with text content: "
                             f"{response.text[:200]!r}")
        return data

    def _completion(self, data: dict[str, Any], request: ChatRequest, latency: float) -> Completion:
        choice = data["choices"][0]
        text = choice["message"].get("content") or ""
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        # A server without usage (or with nonsense there): estimate rather than report 0.
        prompt_tokens = _count(usage.get("prompt_tokens"),
                               lambda: sum(self.count_tokens(m.get("content", "")) for m in request.messages))
        completion_tokens = _count(usage.get("completion_tokens"), lambda: self.count_tokens(text))
        finish_reason = choice.get("finish_reason")
        return Completion(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_s=latency,
            model=str(data.get("model") or self.model),
            finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        )

    def __repr__(self) -> str:
        return f"OpenAICompatLM(model={self.model!r}, base_url={self.base_url!r}, json_mode={self.json_mode!r})"


def _count(value: Any, estimate) -> int:
    """A token count the server reported, or ``estimate()`` when it gave none usable."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 2**31:
        return int(value)
    return estimate()


def _resolve_api_key(api_key: str | None) -> str | None:
    if api_key is None or not api_key.startswith("$"):
        return api_key
    variable = api_key[1:]
    value = os.environ.get(variable)
    if not value:
        raise ValueError(f"api_key={api_key!r}: environment variable {variable} is not set")
    return value


def _server_message(response: requests.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300].strip() or response.reason or "(empty body)"
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        error = error.get("message", error)
    return str(error)[:300]


def _retry_after(response: requests.Response) -> float | None:
    try:
        return float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:197] + "..."
