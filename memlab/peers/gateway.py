"""A loopback OpenAI-compatible endpoint that memlab starts for a peer library and serves from its own LM and embedder.

A peer (mem0, graphiti) talks to its models through the ``openai`` package. Pointing its own
client at this gateway (``http://127.0.0.1:PORT/v1``) keeps the peer's whole code path (how it
builds each request, how it reads the reply) while every call goes through memlab's parts: the
``LM``'s response cache (so a peer's row replays with no model call), its usage meter (build
calls and tokens, like every row) and whatever backend the config names (the in-process
llama.cpp model of the other rows, or a served one); the ``Embedder`` the config names. The
gateway listens on 127.0.0.1 only, and anything but ``POST /v1/chat/completions`` and
``POST /v1/embeddings`` is answered 404 naming it, which the peer reports as its own error.

How a chat request maps onto a ``ChatRequest``:

* ``messages``: role and text (a list of text parts is joined; any other part is refused);
* ``temperature`` (OpenAI's default 1.0 when absent), ``max_tokens`` or ``max_completion_tokens``
  capped at the gateway's ``max_tokens`` (which is also what a request without one gets): a peer
  that asks for 16,384 tokens, as graphiti's fact extraction does, would let a looping 1.5B model
  run for a quarter of an hour on one reply; ``stop``, ``seed`` (memlab's 0 when absent);
* ``response_format``: ``json_object`` asks for any JSON object (``{"type": "object"}``, which a
  llama.cpp backend decodes under a grammar, as llama.cpp's own server does), ``json_schema``
  for its schema, ``text`` for none. ``constrain_json=False`` serves every request as text, as a
  server without constrained decoding does: the reply is what the model writes (a small model
  often fences its JSON in a code block, which the peer's parser may strip);
* ``model``, ``top_p``, ``store``, ``user``, ``n: 1`` and ``stream: false`` are accepted and
  ignored: the model is the ``LM``'s, and ``top_p`` does not change a greedy decode. Anything that
  would change what comes back (``tools``, ``n`` > 1, ``logprobs``, streaming) is refused (400).

A request the backend refuses (``RequestError``: a prompt over the context window) is answered
400 with the backend's message, as a server would. An unreachable backend
(``LMUnavailableError``, 503) or any other fault of memlab's parts (500) is kept in ``fatal``:
the pipeline re-raises it once the peer gives up, so a dead model is never mistaken for a bad
reply.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memlab.embed.base import Embedder
from memlab.lm.base import LM
from memlab.lm.errors import LMUnavailableError, RequestError
from memlab.lm.types import ChatRequest, Completion

_IGNORED = frozenset({"model", "top_p", "store", "user", "stream", "n"})
_SERVED = frozenset({"messages", "temperature", "max_tokens", "max_completion_tokens", "stop", "seed", "response_format"})


class UnsupportedRequest(ValueError):
    """A request the gateway cannot serve faithfully (HTTP 400)."""


def chat_request(body: Any, max_tokens: int) -> ChatRequest:
    """The ``ChatRequest`` of one chat-completions body (module docstring); ``UnsupportedRequest``
    names what it cannot serve."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        raise UnsupportedRequest("the body is not a chat-completions request (no 'messages' list)")
    unknown = sorted(set(body) - _IGNORED - _SERVED)
    if unknown:
        raise UnsupportedRequest(f"memlab's gateway does not serve {', '.join(unknown)}")
    if body.get("stream"):
        raise UnsupportedRequest("memlab's gateway does not stream")
    if body.get("n", 1) != 1:
        raise UnsupportedRequest("memlab's gateway returns one choice (n must be 1)")
    stop = body.get("stop") or ()
    return ChatRequest(
        messages=tuple(_message(m) for m in body["messages"]),
        temperature=float(body.get("temperature", 1.0)),
        max_tokens=min(int(body.get("max_completion_tokens") or body.get("max_tokens") or max_tokens), max_tokens),
        json_schema=_schema(body.get("response_format")),
        stop=(stop,) if isinstance(stop, str) else tuple(stop),
        seed=body.get("seed", 0),
    )


def _message(message: Any) -> dict[str, str]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise UnsupportedRequest(f"a message without a role: {message!r:.120}")
    content = message.get("content")
    if isinstance(content, list):
        if any(not isinstance(part, dict) or part.get("type") != "text" for part in content):
            raise UnsupportedRequest("memlab's gateway serves text content only")
        content = "".join(part.get("text", "") for part in content)
    if not isinstance(content, str):
        raise UnsupportedRequest(f"a {message['role']} message without text content")
    return {"role": message["role"], "content": content}


def _schema(response_format: Any) -> dict[str, Any] | None:
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise UnsupportedRequest("response_format json_schema without a schema")
        return schema
    raise UnsupportedRequest(f"response_format {response_format!r:.80} is not text, json_object or json_schema")


def completion_body(completion: Completion, model: str) -> dict[str, Any]:
    """The chat-completions response body of one ``Completion``."""
    return {
        "id": "memlab-completion",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": completion.text},
            "finish_reason": completion.finish_reason or "stop",
        }],
        "usage": {
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "total_tokens": completion.prompt_tokens + completion.completion_tokens,
        },
    }


def embedding_inputs(body: Any) -> list[str]:
    """The texts of one embeddings request (a string or a list of strings)."""
    texts = body.get("input") if isinstance(body, dict) else None
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, list) and texts and all(isinstance(t, str) for t in texts):
        return texts
    raise UnsupportedRequest("an embeddings request needs 'input': a string or a list of strings (not tokens)")


@dataclass
class GatewayLog:
    """What the gateway served: chat completions, embedding requests, requests refused, and the
    last reply (so a peer's failure can be reported with the completion it could not use)."""

    chat_requests: int = 0
    embedding_requests: int = 0
    refused: list[str] = field(default_factory=list)
    last_reply: str = ""


class ModelGateway:
    """``lm`` and ``embedder`` behind ``http://127.0.0.1:PORT/v1`` for as long as the gateway is
    open (module docstring). Use as a context manager; ``base_url`` is the address to give a peer."""

    def __init__(self, lm: LM, embedder: Embedder, max_tokens: int = 1024, constrain_json: bool = True) -> None:
        self.lm = lm
        self.embedder = embedder
        self.max_tokens = max_tokens
        self.constrain_json = constrain_json
        self.log = GatewayLog()
        self.fatal: Exception | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the model gateway is not open")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "ModelGateway":
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="memlab-gateway", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def serve(self, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        """The status and JSON body answering a POST of ``body`` to ``path``."""
        try:
            if path.rstrip("/").endswith("/chat/completions"):
                return 200, self._chat(body)
            if path.rstrip("/").endswith("/embeddings"):
                return 200, self._embeddings(body)
        except UnsupportedRequest as exc:
            return self._refuse(400, str(exc))
        except RequestError as exc:
            return self._refuse(400, f"{self.lm.name}: {exc}")
        except LMUnavailableError as exc:
            self.fatal = exc
            return self._refuse(503, str(exc))
        except Exception as exc:  # a fault of memlab's own parts: the peer must not go on without them
            self.fatal = exc
            return self._refuse(500, f"{type(exc).__name__}: {exc}")
        return self._refuse(404, f"memlab's gateway serves POST /v1/chat/completions and /v1/embeddings, not {path}")

    def _chat(self, body: Any) -> dict[str, Any]:
        request = chat_request(body, self.max_tokens)
        if not self.constrain_json:
            request = dataclasses.replace(request, json_schema=None)
        self.log.chat_requests += 1
        completion = self.lm.generate([request])[0]
        self.log.last_reply = completion.text
        return completion_body(completion, self.lm.name)

    def _embeddings(self, body: Any) -> dict[str, Any]:
        texts = embedding_inputs(body)
        self.log.embedding_requests += 1
        vectors = self.embedder.encode(texts)
        return {
            "object": "list",
            "model": str(body.get("model") or "memlab-embedder"),
            "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }

    def _refuse(self, status: int, message: str) -> tuple[int, dict[str, Any]]:
        self.log.refused.append(message)
        return status, {"error": {"message": message, "type": "invalid_request_error", "code": status}}


def _handler(gateway: ModelGateway) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"null")
            except json.JSONDecodeError as exc:
                status, reply = gateway._refuse(400, f"the request body is not JSON: {exc}")
            else:
                status, reply = gateway.serve(self.path, body)
            self._send(status, reply)

        def do_GET(self) -> None:  # noqa: N802
            self._send(*gateway._refuse(404, f"memlab's gateway serves POST requests only, not GET {self.path}"))

        def _send(self, status: int, reply: dict[str, Any]) -> None:
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the peer stopped waiting (an interrupt): no one to answer
                pass

        def log_message(self, format: str, *args: Any) -> None:  # the peer's own logs say enough
            pass

    return Handler
