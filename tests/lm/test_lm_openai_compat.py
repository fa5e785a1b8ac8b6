"""OpenAICompatLM against a real llama_cpp.server, and failure modes against local HTTP servers."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from memlab.lm.errors import LMError, LMUnavailableError
from memlab.lm.jsonparse import parse_json
from memlab.lm.openai_compat import OpenAICompatLM
from memlab.lm.types import ChatRequest
from tests.conftest import SERVER_MODEL, free_port

COLOR_SCHEMA = {
    "type": "object",
    "properties": {"color": {"type": "string", "enum": ["red", "green", "blue"]}, "count": {"type": "integer"}},
    "required": ["color", "count"],
    "additionalProperties": False,
}


# ---------------------------------------------------------------- request building (no server)


def test_payload_per_json_mode():
    request = ChatRequest.of("hi", max_tokens=5, stop=("\n",), json_schema=COLOR_SCHEMA, seed=3)
    schema_mode = OpenAICompatLM("m", json_mode="json_schema", cache=None).payload(request)
    assert schema_mode["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": COLOR_SCHEMA},
    }
    assert schema_mode["stop"] == ["\n"] and schema_mode["seed"] == 3 and schema_mode["max_tokens"] == 5
    object_mode = OpenAICompatLM("m", json_mode="json_object", cache=None).payload(request)
    assert object_mode["response_format"] == {"type": "json_object", "schema": COLOR_SCHEMA}
    assert "response_format" not in OpenAICompatLM("m", json_mode="none", cache=None).payload(request)
    assert "response_format" not in OpenAICompatLM("m", cache=None).payload(ChatRequest.of("hi"))
    # The JSON mode changes outputs, so it is part of the cache identity; the URL is not.
    names = {OpenAICompatLM("m", json_mode=mode, cache=None).name for mode in ("json_schema", "json_object", "none")}
    assert len(names) == 3
    assert OpenAICompatLM("m", base_url="http://a/v1").name == OpenAICompatLM("m", base_url="http://b/v1").name


def test_constructor_checks(monkeypatch):
    with pytest.raises(ValueError, match="json_mode"):
        OpenAICompatLM("m", json_mode="grammar")
    monkeypatch.setenv("MEMLAB_TEST_KEY", "sk-test")
    assert OpenAICompatLM("m", api_key="$MEMLAB_TEST_KEY", cache=None)._api_key == "sk-test"
    monkeypatch.delenv("MEMLAB_TEST_KEY")
    with pytest.raises(ValueError, match="MEMLAB_TEST_KEY is not set"):
        OpenAICompatLM("m", api_key="$MEMLAB_TEST_KEY")


# ---------------------------------------------------------------- failure modes (local servers)


class _ScriptedServer:
    """A real HTTP server on 127.0.0.1 that answers POSTs from a script, then proxies upstream.

    Each script item is ``(status, json_body, headers)``; when the script is used up, requests
    are forwarded to ``upstream`` (a real model server) or answered 503.
    """

    def __init__(self, script, upstream: str | None = None) -> None:
        self.script = list(script)
        self.upstream = upstream
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                if server.script:
                    status, payload, headers = server.script.pop(0)
                    data = json.dumps(payload).encode()
                elif server.upstream:
                    reply = requests.post(server.upstream + self.path.removeprefix("/v1"), json=body, timeout=120)
                    status, data, headers = reply.status_code, reply.content, {}
                else:
                    status, data, headers = 503, b'{"error": {"message": "no script left"}}', {}
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_server_down_gives_clear_error_after_retries():
    port = free_port()  # nothing listens there
    lm = OpenAICompatLM("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_s=0.01, cache=None)
    start = time.monotonic()
    with pytest.raises(LMUnavailableError) as info:
        lm.generate([ChatRequest.of("hi")])
    message = str(info.value)
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in message
    assert "3 attempt(s)" in message and "connection failed" in message
    assert time.monotonic() - start < 5


def test_persistent_503_is_retried_then_reported():
    errors = [(503, {"error": {"message": "model is loading"}}, {})] * 3
    with _ScriptedServer(errors) as server:
        lm = OpenAICompatLM("m", base_url=server.base_url, max_retries=2, backoff_s=0.01, cache=None)
        with pytest.raises(LMUnavailableError, match="HTTP 503: model is loading"):
            lm.generate([ChatRequest.of("hi")])
    assert len(server.requests) == 3


def test_client_error_fails_at_once_with_the_server_message():
    bad = [(400, {"error": {"message": "max_tokens is too large"}}, {})]
    with _ScriptedServer(bad) as server:
        lm = OpenAICompatLM("m", base_url=server.base_url, max_retries=4, backoff_s=0.01, cache=None)
        with pytest.raises(LMError, match="HTTP 400: max_tokens is too large") as info:
            lm.generate([ChatRequest.of("hi")])
    assert not isinstance(info.value, LMUnavailableError)
    assert len(server.requests) == 1


def test_wrong_model_name_is_unavailable_at_once():
    with _ScriptedServer([(404, {"error": {"message": "model 'x' not found"}}, {})]) as server:
        lm = OpenAICompatLM("x", base_url=server.base_url, api_key="sk-abc", backoff_s=0.01, cache=None)
        with pytest.raises(LMUnavailableError, match="404: model 'x' not found"):
            lm.generate([ChatRequest.of("hi")])
    assert server.headers[0]["Authorization"] == "Bearer sk-abc"


# ---------------------------------------------------------------- a real model server


def test_chat_completion_against_llama_server(llama_server, tmp_path):
    lm = OpenAICompatLM(SERVER_MODEL, base_url=llama_server, json_mode="json_object", cache=str(tmp_path / "c.sqlite"))
    request = ChatRequest.of("What is the capital of France?", max_tokens=24)
    first = lm.generate([request])[0]
    assert first.text.strip()
    assert first.prompt_tokens > 5 and 0 < first.completion_tokens <= 24
    assert first.finish_reason in ("stop", "length") and first.latency_s > 0
    second = lm.generate([request])[0]
    assert second.cached and second.text == first.text


def test_json_schema_is_enforced_by_llama_server(llama_server):
    lm = OpenAICompatLM(SERVER_MODEL, base_url=llama_server, json_mode="json_object", cache=None)
    # The prompt does not ask for JSON: only the constraint makes the output follow the schema.
    text = lm.complete("Write two sentences about the sea.", max_tokens=48, json_schema=COLOR_SCHEMA)
    value = json.loads(text)  # valid JSON as written, no repair needed
    assert parse_json(text, COLOR_SCHEMA) == value
    assert value["color"] in ("red", "green", "blue")


def test_llama_cpp_server_rejects_the_openai_json_schema_format(llama_server):
    # Why json_mode exists: llama_cpp.server accepts response_format.type "text" or
    # "json_object" only, and answers the OpenAI "json_schema" format with an HTTP 500 (so it
    # is retried); the final error carries the server's explanation.
    lm = OpenAICompatLM(SERVER_MODEL, base_url=llama_server, json_mode="json_schema", max_retries=1, backoff_s=0.01, cache=None)
    with pytest.raises(LMUnavailableError, match=r"(?s)2 attempt\(s\).*HTTP 500.*'text' or 'json_object'"):
        lm.complete("hi", max_tokens=4, json_schema=COLOR_SCHEMA)


def test_concurrent_batch_keeps_order(llama_server):
    prompts = ["Say hello.", "Name a fruit.", "Count to three.", "What colour is grass?"]
    requests_ = [ChatRequest.of(p, max_tokens=12) for p in prompts]
    concurrent = OpenAICompatLM(SERVER_MODEL, base_url=llama_server, max_concurrency=4, cache=None).generate(requests_)
    sequential = [
        OpenAICompatLM(SERVER_MODEL, base_url=llama_server, max_concurrency=1, cache=None).generate([r])[0] for r in requests_
    ]
    assert [c.text for c in concurrent] == [c.text for c in sequential]
    assert len({c.text for c in concurrent}) > 1


def test_503_then_429_then_success_through_a_proxy(llama_server):
    script = [
        (503, {"error": {"message": "overloaded"}}, {}),
        (429, {"error": {"message": "slow down"}}, {"Retry-After": "0"}),
    ]
    with _ScriptedServer(script, upstream=llama_server) as proxy:
        lm = OpenAICompatLM(SERVER_MODEL, base_url=proxy.base_url, max_retries=3, backoff_s=0.01, cache=None)
        completion = lm.generate([ChatRequest.of("Name a fruit.", max_tokens=8)])[0]
    direct = OpenAICompatLM(SERVER_MODEL, base_url=llama_server, cache=None).generate([ChatRequest.of("Name a fruit.", max_tokens=8)])[0]
    assert len(proxy.requests) == 3
    assert completion.text == direct.text and completion.completion_tokens > 0
