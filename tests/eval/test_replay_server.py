"""memlab.lm.replay_server: a served model's stand-in, replaying a cache with set latencies."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from memlab.lm import ChatRequest, OpenAICompatLM, replay_server
from memlab.lm.cache import ResponseCache
from memlab.lm.errors import RequestError
from memlab.lm.types import Completion

SCHEMA = {"title": "Reply", "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def filled_cache(tmp_path, requests):
    cache = ResponseCache.open(tmp_path / "cache.sqlite")
    for i, request in enumerate(requests):
        cache.put("local-model", request, Completion(text=f"reply {i}", prompt_tokens=100, completion_tokens=10,
                                                     latency_s=1.0, model="local", finish_reason="stop"))
    return tmp_path / "cache.sqlite"


def test_replays_the_cached_reply_of_every_request_the_lm_sends(tmp_path):
    requests = [ChatRequest.of("plain"), ChatRequest.of("with a schema", json_schema=SCHEMA, max_tokens=30),
                ChatRequest.of([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], stop=("\n",))]
    with replay_server.ReplayServer(filled_cache(tmp_path, requests), "local-model", request_s=0, prompt_token_s=0,
                                    token_s=0) as server:
        lm = OpenAICompatLM("served", base_url=server.url, cache=None, max_retries=0)
        assert [c.text for c in lm.generate(requests)] == ["reply 0", "reply 1", "reply 2"]
        assert lm.usage.snapshot()["prompt_tokens"] == 300
        with pytest.raises(RequestError, match="holds no reply"):
            lm.generate([ChatRequest.of("never cached")])
        assert server.counts["replies"] == 3 and server.counts["misses"] == 1


def test_slots_bound_the_requests_served_at_once(tmp_path):
    requests = [ChatRequest.of(f"question {i}") for i in range(4)]
    # each reply holds a slot for 0.05 + 100 * 0.001 + 10 * 0.005 = 0.2 s
    with replay_server.ReplayServer(filled_cache(tmp_path, requests), "local-model", slots=2, request_s=0.05,
                                    prompt_token_s=0.001, token_s=0.005) as server:
        lm = OpenAICompatLM("served", base_url=server.url, cache=None, max_retries=0)
        t0 = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda r: lm.generate([r]), requests))
        wall = time.monotonic() - t0
    assert 0.4 <= wall < 0.8  # two rounds of two, not one round of four
    assert server.counts["busy_seconds"] == pytest.approx(0.8)


def test_the_server_stops_by_itself_after_its_requests(tmp_path):
    requests = [ChatRequest.of("one")]
    server = replay_server.ReplayServer(filled_cache(tmp_path, requests), "local-model", request_s=0,
                                        prompt_token_s=0, token_s=0, max_requests=1).start()
    lm = OpenAICompatLM("served", base_url=server.url, cache=None, max_retries=0)
    assert lm.generate(requests)[0].text == "reply 0"
    server._thread.join(timeout=5)
    assert not server._thread.is_alive()


def test_misses_can_be_answered_with_a_placeholder_for_timing(tmp_path):
    with replay_server.ReplayServer(filled_cache(tmp_path, []), "local-model", request_s=0, prompt_token_s=0,
                                    token_s=0, synthesize_misses=7) as server:
        lm = OpenAICompatLM("served", base_url=server.url, cache=None, max_retries=0)
        reply = lm.generate([ChatRequest.of("x" * 400)])[0]
    assert reply.text == "(simulated reply)" and reply.completion_tokens == 7 and reply.prompt_tokens == 100
    assert server.counts["synthesized"] == 1 and server.counts["misses"] == 0
