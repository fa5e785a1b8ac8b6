from __future__ import annotations

import multiprocessing
import sqlite3
import threading

import pytest

from memlab.lm.base import LM
from memlab.lm.cache import CacheError, ResponseCache, cache_key, default_cache_path
from memlab.lm.types import ChatRequest, Completion


def _completion(text: str = "hello", **kw) -> Completion:
    fields = dict(text=text, prompt_tokens=12, completion_tokens=3, latency_s=0.25, model="m", finish_reason="stop")
    fields.update(kw)
    return Completion(**fields)


def _request(prompt: str = "hi", **kw) -> ChatRequest:
    return ChatRequest.of(prompt, **kw)


def test_miss_then_hit_returns_stored_fields_marked_cached(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    request = _request()
    assert cache.get("model-a", request) is None
    cache.put("model-a", request, _completion())
    hit = cache.get("model-a", request)
    assert hit == _completion(cached=True)
    assert len(cache) == 1


def test_key_depends_on_model_and_every_request_field(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    base = _request("q", temperature=0.0, max_tokens=10)
    cache.put("model-a", base, _completion("a"))
    variants = [
        ("model-b", base),
        ("model-a", _request("q2", temperature=0.0, max_tokens=10)),
        ("model-a", _request("q", temperature=0.5, max_tokens=10)),
        ("model-a", _request("q", temperature=0.0, max_tokens=11)),
        ("model-a", _request("q", temperature=0.0, max_tokens=10, stop=("\n",))),
        ("model-a", _request("q", temperature=0.0, max_tokens=10, json_schema={"type": "object"})),
        ("model-a", _request("q", temperature=0.0, max_tokens=10, seed=1)),
    ]
    for model, request in variants:
        assert cache.get(model, request) is None, (model, request)
    assert len({cache_key(m, r) for m, r in variants + [("model-a", base)]}) == len(variants) + 1
    # An equal request built separately hits.
    assert cache.get("model-a", _request("q", temperature=0.0, max_tokens=10)).text == "a"


def test_persists_across_instances(tmp_path):
    path = tmp_path / "sub" / "c.sqlite"
    first = ResponseCache(path)
    first.put("m", _request(), _completion("kept"))
    first.close()
    second = ResponseCache(path)
    assert second.get("m", _request()).text == "kept"


def test_open_default_uses_env_and_shares_instances(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "env.sqlite"))
    assert default_cache_path() == tmp_path / "env.sqlite"
    cache = ResponseCache.open("default")
    assert cache.path == (tmp_path / "env.sqlite").resolve()
    assert ResponseCache.open(tmp_path / "env.sqlite") is cache
    cache.close()
    assert ResponseCache.open("default") is not cache


def test_corrupt_file_gives_clear_error_naming_it(tmp_path):
    path = tmp_path / "broken.sqlite"
    path.write_bytes(b"this is not a database at all, just text " * 100)
    with pytest.raises(CacheError, match="broken.sqlite"):
        ResponseCache(path)


def test_a_busy_answer_while_opening_is_tried_again_and_a_lasting_one_is_reported(tmp_path, monkeypatch):
    """Two processes creating one file can get SQLite's immediate busy (no busy timeout applies):
    opening tries again; a file that stays busy is reported as busy, not as broken."""
    real = ResponseCache._connect_once
    answers = iter([sqlite3.OperationalError("database is locked")])

    def busy_once(self):
        for exc in answers:
            raise exc
        return real(self)

    monkeypatch.setattr(ResponseCache, "_connect_once", busy_once)
    assert ResponseCache(tmp_path / "c.sqlite").get("m", _request()) is None  # opened on the second try

    def always_busy(self):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(ResponseCache, "_connect_once", always_busy)
    with pytest.raises(CacheError, match="is busy"):
        ResponseCache(tmp_path / "d.sqlite")


def test_entries_round_trip_requests_and_filter_by_model(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    stored = []
    for i in range(5):
        request = ChatRequest.of(
            [{"role": "system", "content": "sys"}, {"role": "user", "content": f"q{i}"}],
            stop=("END",),
            json_schema={"type": "object", "properties": {"a": {"type": "integer"}}},
        )
        model = "m1" if i % 2 == 0 else "m2"
        cache.put(model, request, _completion(f"a{i}"))
        stored.append((model, request, f"a{i}"))
    entries = list(cache.entries(page_size=2))  # several pages
    assert [(e.model, e.request, e.completion.text) for e in entries] == stored
    assert all(e.completion.cached for e in entries)
    assert [e.completion.text for e in cache.entries(model="m2")] == ["a1", "a3"]
    assert cache.models() == ["m1", "m2"]


def test_concurrent_threads_share_one_cache(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(40):
                request = _request(f"w{worker}-{i}")
                cache.put("m", request, _completion(f"{worker}:{i}"))
                assert cache.get("m", request).text == f"{worker}:{i}"
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(cache) == 8 * 40


def _write_from_process(path: str, worker: int, count: int) -> None:
    cache = ResponseCache(path)
    for i in range(count):
        cache.put("m", ChatRequest.of(f"p{worker}-{i}"), Completion(f"{worker}-{i}", 1, 1, 0.0))


def test_concurrent_processes_write_the_same_file(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    ResponseCache(path).close()  # create the file (and its WAL mode) once
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_write_from_process, args=(path, w, 60)) for w in range(3)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=120)
    assert [p.exitcode for p in processes] == [0, 0, 0]
    cache = ResponseCache(path)
    assert len(cache) == 180
    assert cache.get("m", ChatRequest.of("p2-59")).text == "2-59"


class _CountingLM(LM):
    """Answers with the prompt reversed; counts backend calls (a control-flow double)."""

    def __init__(self, cache: str | None) -> None:
        super().__init__(cache=cache)
        self.calls = 0

    @property
    def name(self) -> str:
        return "counting"

    def _generate(self, requests):
        self.calls += len(requests)
        return [Completion(r.messages[-1]["content"][::-1], 5, 2, 0.1) for r in requests]


def test_lm_generate_uses_the_cache_and_meters_usage(tmp_path):
    path = str(tmp_path / "lm.sqlite")
    lm = _CountingLM(cache=path)
    first = lm.generate([_request("abc"), _request("xyz")])
    again = lm.generate([_request("abc"), _request("new")])
    assert [c.text for c in first] == ["cba", "zyx"]
    assert [c.cached for c in again] == [True, False]
    assert again[0].text == "cba"
    assert lm.calls == 3
    usage = lm.usage.snapshot()
    assert usage["llm_calls"] == 4 and usage["uncached_calls"] == 3
    assert usage["prompt_tokens"] == 20  # cached calls count their tokens too
    # A second LM on the same file (another run) gets hits without calling its backend.
    rerun = _CountingLM(cache=path)
    assert [c.cached for c in rerun.generate([_request("abc"), _request("xyz")])] == [True, True]
    assert rerun.calls == 0


class _FailingOnLM(_CountingLM):
    """Fails on the request ``fail_on``, as a run interrupted mid-batch would."""

    def __init__(self, cache: str | None, fail_on: str, at_once: int) -> None:
        super().__init__(cache)
        self.fail_on, self.at_once = fail_on, at_once

    @property
    def requests_at_once(self) -> int:
        return self.at_once

    def _generate(self, requests):
        if any(r.messages[-1]["content"] == self.fail_on for r in requests):
            raise KeyboardInterrupt
        return super()._generate(requests)


def test_an_interrupted_batch_keeps_the_completions_of_finished_rounds(tmp_path):
    path = str(tmp_path / "lm.sqlite")
    prompts = ["a1", "b2", "c3", "d4", "e5"]
    with pytest.raises(KeyboardInterrupt):
        _FailingOnLM(path, fail_on="e5", at_once=2).generate([_request(p) for p in prompts])
    resumed = _CountingLM(cache=path)
    assert [c.cached for c in resumed.generate([_request(p) for p in prompts])] == [True] * 4 + [False]
    assert resumed.calls == 1


class _WatchedLM(_FailingOnLM):
    """Notes the meter's uncached calls as each round starts."""

    def _generate(self, requests):
        self.seen.append(self.usage.snapshot()["uncached_calls"])
        return super()._generate(requests)


def test_a_batch_is_metered_round_by_round_and_a_failed_one_is_counted_once_when_asked_again(tmp_path):
    lm = _WatchedLM(str(tmp_path / "lm.sqlite"), fail_on="e5", at_once=2)
    lm.seen = []
    batch = [_request(p) for p in ["a1", "b2", "c3", "d4", "e5"]]
    with pytest.raises(KeyboardInterrupt):
        lm.generate(batch)
    assert lm.seen == [0, 2, 4]  # the rounds that ended show while the batch runs
    assert lm.usage.snapshot()["llm_calls"] == 0  # taken back with the failure
    lm.fail_on = None
    lm.generate(batch)  # a stage asks again: four from the cache, one new
    usage = lm.usage.snapshot()
    assert (usage["llm_calls"], usage["uncached_calls"]) == (5, 1)
