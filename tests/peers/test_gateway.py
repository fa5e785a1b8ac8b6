"""The loopback gateway a peer library's own OpenAI client talks to (memlab.peers.gateway)."""

from __future__ import annotations

import numpy as np
import pytest
import requests
from fakes import ReplayLM

from memlab.embed.base import Embedder
from memlab.lm.errors import LMUnavailableError, RequestError
from memlab.lm.types import ChatRequest
from memlab.peers.gateway import ModelGateway, UnsupportedRequest, chat_request


class _TinyEmbedder(Embedder):
    """Three-dimensional vectors from letter counts: enough to check what the gateway returns."""

    def _load(self) -> None:
        pass

    def _encode(self, texts):
        rows = np.array([[t.count("a") + 1.0, t.count("b"), t.count("c")] for t in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    def _dim(self) -> int:
        return 3

    def _count_tokens(self, text: str) -> int:
        return len(text.split())

    def _identity(self):
        return {"class": "tiny"}


def _body(**extra):
    return {"model": "whatever", "messages": [{"role": "user", "content": "hi"}], **extra}


def test_a_request_maps_onto_a_chat_request():
    request = chat_request(_body(temperature=0, max_tokens=12, stop="\n", seed=3, top_p=0.1,
                                 response_format={"type": "json_object"}), max_tokens=99)
    assert request == ChatRequest(messages=({"role": "user", "content": "hi"},), temperature=0.0, max_tokens=12,
                                  json_schema={"type": "object"}, stop=("\n",), seed=3)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    request = chat_request(_body(max_completion_tokens=7, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}), max_tokens=99)
    assert (request.json_schema, request.max_tokens, request.temperature, request.seed) == (schema, 7, 1.0, 0)
    assert chat_request(_body(response_format={"type": "text"}), 99).json_schema is None
    assert chat_request(_body(), 99).max_tokens == 99
    assert chat_request(_body(max_tokens=16384), 2048).max_tokens == 2048  # a peer asking for more is capped
    parts = chat_request({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                      {"type": "text", "text": "b"}]}]}, 9)
    assert parts.messages == ({"role": "user", "content": "ab"},)


@pytest.mark.parametrize("body, named", [
    (_body(tools=[{"type": "function"}]), "tools"),
    (_body(logprobs=True), "logprobs"),
    (_body(n=2), "one choice"),
    (_body(stream=True), "stream"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "text content"),
    (_body(response_format={"type": "json_schema", "json_schema": {}}), "without a schema"),
    (_body(response_format={"type": "grammar"}), "json_object"),
])
def test_what_it_cannot_serve_faithfully_is_refused_by_name(body, named):
    with pytest.raises(UnsupportedRequest, match=named):
        chat_request(body, 10)


def test_it_serves_chat_completions_and_embeddings_on_loopback_through_the_lm():
    lm = ReplayLM(["first reply"])
    with ModelGateway(lm, _TinyEmbedder()) as gateway:
        assert gateway.base_url.startswith("http://127.0.0.1:")
        reply = requests.post(f"{gateway.base_url}/chat/completions", json=_body(temperature=0), timeout=10)
        assert reply.status_code == 200
        body = reply.json()
        assert body["choices"][0]["message"] == {"role": "assistant", "content": "first reply"}
        assert body["usage"]["completion_tokens"] > 0
        vectors = requests.post(f"{gateway.base_url}/embeddings", json={"input": ["a", "bb"]}, timeout=10).json()
        assert [row["index"] for row in vectors["data"]] == [0, 1]
        assert np.allclose(vectors["data"][0]["embedding"], [1.0, 0.0, 0.0], atol=1e-6)
        assert (gateway.log.chat_requests, gateway.log.embedding_requests, gateway.log.last_reply) == (1, 1, "first reply")
    assert lm.requests[0].temperature == 0.0
    assert lm.usage.snapshot()["llm_calls"] == 1  # the LM's own meter counted the peer's call


def test_other_paths_refused_and_recorded():
    with ModelGateway(ReplayLM([]), _TinyEmbedder()) as gateway:
        assert requests.get(f"{gateway.base_url}/models", timeout=10).status_code == 404
        refused = requests.post(f"{gateway.base_url}/completions", json={"prompt": "x"}, timeout=10)
        assert refused.status_code == 404 and "/completions" in refused.json()["error"]["message"]
        broken = requests.post(f"{gateway.base_url}/chat/completions", data=b"{not json", timeout=10)
        assert broken.status_code == 400
        tokens = requests.post(f"{gateway.base_url}/embeddings", json={"input": [[1, 2]]}, timeout=10)
        assert tokens.status_code == 400 and "not tokens" in tokens.json()["error"]["message"]
    assert len(gateway.log.refused) == 4
    assert gateway.fatal is None


class _Raising(ReplayLM):
    def __init__(self, error: Exception) -> None:
        super().__init__([])
        self.error = error

    def _generate(self, requests):
        raise self.error


def test_a_refused_request_is_a_400_and_a_dead_model_is_kept_as_fatal():
    with ModelGateway(_Raising(RequestError("prompt too long")), _TinyEmbedder()) as gateway:
        reply = requests.post(f"{gateway.base_url}/chat/completions", json=_body(), timeout=10)
        assert reply.status_code == 400 and "prompt too long" in reply.json()["error"]["message"]
        assert gateway.fatal is None
    down = LMUnavailableError("server at http://127.0.0.1:1 is down")
    with ModelGateway(_Raising(down), _TinyEmbedder()) as gateway:
        assert requests.post(f"{gateway.base_url}/chat/completions", json=_body(), timeout=10).status_code == 503
        assert gateway.fatal is down


def test_the_gateway_stops_listening_when_closed():
    with ModelGateway(ReplayLM([]), _TinyEmbedder()) as gateway:
        url = gateway.base_url
    with pytest.raises(requests.ConnectionError):
        requests.post(f"{url}/chat/completions", json=_body(), timeout=5)
    with pytest.raises(RuntimeError, match="not open"):
        gateway.base_url


def test_unconstrained_json_goes_to_the_model_as_text():
    lm = ReplayLM(["```json\n{}\n```", "{}"])
    body = _body(temperature=0, response_format={"type": "json_object"})
    with ModelGateway(lm, _TinyEmbedder(), constrain_json=False) as gateway:
        assert requests.post(f"{gateway.base_url}/chat/completions", json=body, timeout=10).status_code == 200
    with ModelGateway(lm, _TinyEmbedder()) as gateway:
        assert requests.post(f"{gateway.base_url}/chat/completions", json=body, timeout=10).status_code == 200
    assert [r.json_schema for r in lm.requests] == [None, {"type": "object"}]
