"""A stand-in for a GPU model server: OpenAI-compatible, answering from a response cache with set latencies.

Run one from the shell with ``eval/replay_server.py``:

    python eval/replay_server.py --cache eval/caches/responses.sqlite --source-model 'llamacpp:...' \
        [--port 0] [--slots 8] [--request-s 0.02] [--prompt-token-s 0.0002] [--token-s 0.02] \
        [--max-requests 100000] [--max-seconds 3600]

``POST /v1/chat/completions`` rebuilds the ``ChatRequest`` that ``OpenAICompatLM`` sent (messages,
temperature, max_tokens, stop, seed and the JSON schema of ``response_format``) and replies with
the completion ``--source-model`` gave that request, as stored in the response cache: the text a
real run of that model wrote, so a run against this server makes the same predictions as the run
that filled the cache. A request the cache does not hold is refused (HTTP 400, counted as a miss),
or, with ``--synthesize-misses N``, answered "(simulated reply)" as if N tokens were generated,
with the prompt's tokens estimated at 4 characters each (counted as ``synthesized``): enough to time
a pipeline whose later calls do not depend on the replies (RAG's answers), never to score it.

Timing: a reply occupies one of ``slots`` (the server's concurrent sequences; a request waits for a
free one) for ``request_s + prompt_tokens * prompt_token_s + completion_tokens * token_s`` seconds,
with the token counts the cache recorded. The defaults model a 1.5B model on one datacentre GPU
with continuous batching: about 5,000 prompt tokens/s and 50 generated tokens/s per sequence,
independent of how many sequences share the GPU (an optimistic server: real ones slow down
somewhat as slots fill). The server stops by itself after ``max_requests`` replies or
``max_seconds`` (so a benchmark that dies cannot leave it running).

In a script: ``with ReplayServer(cache_path, source_model, ...) as server: server.url``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from memlab.lm.cache import ResponseCache
from memlab.lm.types import ChatRequest, Completion


class ReplayServer:
    def __init__(self, cache: str | Path, source_model: str, *, host: str = "127.0.0.1", port: int = 0,
                 slots: int = 8, request_s: float = 0.02, prompt_token_s: float = 0.0002, token_s: float = 0.02,
                 max_requests: int = 100_000, max_seconds: float = 3600.0,
                 synthesize_misses: int | None = None) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.cache = ResponseCache.open(cache)
        self.source_model = source_model
        self.timing = (request_s, prompt_token_s, token_s)
        self.max_requests = max_requests
        self.synthesize_misses = synthesize_misses
        self.max_seconds = max_seconds
        self.slots = threading.BoundedSemaphore(slots)
        self.counts = {"replies": 0, "synthesized": 0, "misses": 0, "bad_requests": 0, "busy_seconds": 0.0}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._deadline: threading.Timer | None = None
        self._stopped = False

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "ReplayServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="replay-server", daemon=True)
        self._thread.start()
        self._deadline = threading.Timer(self.max_seconds, self.stop)
        self._deadline.daemon = True
        self._deadline.start()
        return self

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self._deadline is not None:
            self._deadline.cancel()
        threading.Thread(target=self._httpd.shutdown, daemon=True).start()  # shutdown() blocks in a handler
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._httpd.server_close()

    def __enter__(self) -> "ReplayServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def request_of(self, body: dict) -> ChatRequest:
        """The ``ChatRequest`` behind an ``OpenAICompatLM`` body (``OpenAICompatLM.payload``)."""
        schema = None
        response_format = body.get("response_format")
        if isinstance(response_format, dict):
            schema = (response_format.get("json_schema") or {}).get("schema") or response_format.get("schema")
        return ChatRequest(messages=tuple(dict(m) for m in body["messages"]), temperature=body.get("temperature", 0.0),
                           max_tokens=body.get("max_tokens", 256), json_schema=schema,
                           stop=tuple(body.get("stop") or ()), seed=body.get("seed"))

    def reply(self, body: dict) -> tuple[int, dict]:
        try:
            request = self.request_of(body)
        except (KeyError, TypeError, ValueError) as e:
            return self._count("bad_requests", 400, f"not a chat completion request: {e}")
        completion = self.cache.get(self.source_model, request)
        if completion is None and self.synthesize_misses is None:
            return self._count("misses", 400, f"the replay cache holds no reply of {self.source_model} to this request")
        if completion is None:
            prompt = sum(len(m.get("content") or "") for m in request.messages)
            completion = Completion(text="(simulated reply)", prompt_tokens=max(1, prompt // 4),
                                    completion_tokens=self.synthesize_misses, latency_s=0.0)
        request_s, prompt_token_s, token_s = self.timing
        busy = request_s + completion.prompt_tokens * prompt_token_s + completion.completion_tokens * token_s
        with self.slots:
            time.sleep(busy)
        with self._lock:
            self.counts["replies"] += 1
            self.counts["synthesized"] += int(not completion.cached)
            self.counts["busy_seconds"] += busy
            done = self.counts["replies"] >= self.max_requests
        if done:
            threading.Thread(target=self.stop, daemon=True).start()
        return 200, {
            "id": f"replay-{self.counts['replies']}", "object": "chat.completion", "model": body.get("model", ""),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": completion.text},
                         "finish_reason": completion.finish_reason or "stop"}],
            "usage": {"prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens},
        }

    def _count(self, what: str, status: int, message: str) -> tuple[int, dict]:
        with self._lock:
            self.counts[what] += 1
        return status, {"error": {"message": message, "type": "invalid_request_error"}}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                except ValueError as e:
                    self._send(*server._count("bad_requests", 400, f"body is not JSON: {e}"))
                    return
                self._send(*server.reply(body))

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # one line per request would drown the benchmark's output
                pass

        return Handler
