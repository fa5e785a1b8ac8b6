"""Issue 22, section 2, at the LM layer: every way a reply can be malformed is a ``ParseError``
(or, for what a backend botched, an ``LMError`` that is never cached), reading a reply is
linear, and a busy response cache says it is busy."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import memlab.lm.cache as cache_module
from memlab.lm.cache import CacheError, ResponseCache, cache_key
from memlab.lm.errors import AmbiguousReplyError, LMError, LMUnavailableError, ParseError, RequestError
from memlab.lm.jsonparse import parse_json, strip_thinking, visible_text
from memlab.lm.openai_compat import OpenAICompatLM
from memlab.lm.types import ChatRequest, Completion
from tests.conftest import free_port


# -- parse_json raises only ParseError ------------------------------------------------------------
@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "[" * 5000, '{"a": ' * 3000 + "1" + "}" * 3000])
def test_deeply_nested_json_is_a_parse_error(text):
    with pytest.raises(ParseError, match="nested deeper than"):
        parse_json(text)


def test_nesting_within_the_bound_is_read():
    assert parse_json("[" * 30 + "1" + "]" * 30) == json.loads("[" * 30 + "1" + "]" * 30)


@pytest.mark.parametrize("text", ['{"a": ' + "1" * 5000 + "}", '{"a": -' + "9" * 4400, '{"a": 1e999}',
                                  '{"a": 1e400, "b": 2}'])
def test_huge_numbers_are_a_parse_error(text):
    with pytest.raises(ParseError, match="too long or too large"):
        parse_json(text)


@pytest.mark.parametrize("text", ['{"score": NaN}', '{"score": Infinity}', '[-Infinity]'])
def test_nan_and_infinity_are_not_numbers(text):
    with pytest.raises(ParseError):
        parse_json(text)


def test_a_key_given_twice_with_different_values_is_ambiguous():
    with pytest.raises(AmbiguousReplyError, match="'label' is given twice"):
        parse_json('{"label": "CORRECT", "label": "WRONG"}')
    # ... wherever it is, and whatever else the text holds
    with pytest.raises(AmbiguousReplyError):
        parse_json('{"r": {"label": "CORRECT", "label": "WRONG"}} {"label": "CORRECT"}', {"type": "object"})
    with pytest.raises(AmbiguousReplyError):  # the tolerant reader too
        parse_json("{'label': 'CORRECT', 'label': 'WRONG',}")
    assert parse_json('{"label": "WRONG", "label": "WRONG"}') == {"label": "WRONG"}


def test_an_integer_in_a_schema_is_a_python_int():
    schema = {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}
    assert parse_json('{"i": 2}', schema) == {"i": 2}
    with pytest.raises(ParseError, match="not of type 'integer'"):
        parse_json('{"i": 2.0}', schema)  # jsonschema alone would pass it, and list[2.0] fails


def test_strings_in_the_json_are_cleaned_of_escaped_surrogates():
    assert parse_json('{"a": "Rex \\ud83d", "\\ud83dk": ["\\udc00b"]}') == {"a": "Rex ", "k": ["b"]}
    assert parse_json('{"a": "\\ud83d\\ude00"}') == {"a": "\U0001F600"}  # a pair is a character


def test_strip_thinking_is_linear_in_its_tags():
    for text in ("<think>" * 20_000, "</think>" * 20_000 + "x", "<think>a</think>" * 20_000 + "x",
                 "<think>" * 20_000 + "</think>"):
        start = time.thread_time()
        try:
            strip_thinking(text)
        except ParseError:
            pass
        assert time.thread_time() - start < 0.5, text[:20]
    # what it keeps is unchanged
    assert strip_thinking("<think>a</think>b<think>c</think>d") == "bd"
    assert strip_thinking("a</think>b</think>c") == "c"
    assert strip_thinking("<think>a<think>b</think>c") == "c"
    assert strip_thinking("answer first <think>then thoughts") == "answer first "
    with pytest.raises(ParseError, match="<think>"):
        strip_thinking("<THINK>The dog is called Rex.")


def test_reading_a_megabyte_reply_takes_well_under_a_second():
    for text in ('{"summary": "' + "x" * 1_000_000, '{"a": "' * 32 + "y" * 1_000_000, "x" * 1_000_000):
        start = time.thread_time()
        try:
            parse_json(text, {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]})
        except ParseError:
            pass
        assert time.thread_time() - start < 1.0


def test_visible_text_drops_reasoning_special_tokens_and_boms():
    assert visible_text("<think>The dog is called Rex.</think>\nRex").strip() == "Rex"
    assert visible_text("Rex<|im_end|>") == "Rex"
    assert visible_text("<|im_start|>assistant\nRex<|im_end|>\n<|im_start|>user\nWhat else?").strip() == "Rex"
    assert visible_text("\ufeffRex</s>") == "Rex"
    assert visible_text("Rex<|eot_id|><|start_header_id|>user<|end_header_id|>hi") == "Rex"
    with pytest.raises(ParseError):
        visible_text("<think>The dog is called Rex.")


# -- a Completion is text, cleaned; the cache stores only completions -----------------------------
def test_a_completion_is_cleaned_text():
    assert Completion("\ufeffRex\ud83d\x00", 1, 1, 0.0).text == "Rex"
    for bad in (5, ["Rex"], None, {"text": "Rex"}):
        with pytest.raises(LMError, match="must be a string"):
            Completion(bad, 1, 1, 0.0)  # type: ignore[arg-type]


def test_the_cache_refuses_what_is_not_a_completion_and_misses_on_a_row_that_is_not_text(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    request = ChatRequest.of("hi")

    class NotACompletion:
        text, prompt_tokens, completion_tokens, latency_s, model, finish_reason = 5, 1, 1, 0.0, "m", None

    with pytest.raises(CacheError, match="not a completion"):
        cache.put("m", request, NotACompletion())  # type: ignore[arg-type]
    assert len(cache) == 0
    # A row written by something else with a blob for text reads as a miss, never as a reply.
    cache._execute("INSERT INTO responses VALUES (?, 'm', ?, ?, 1, 1, 0.0, 'm', NULL, 0)",
                   (cache_key("m", request), request.cache_key_payload(), b"\x00\x01"))
    assert len(cache) == 1 and cache.get("m", request) is None
    cache.close()


# -- the server's reply: what is not a chat completion is never a Completion, never cached ---------
class _Server:
    """A local HTTP server answering each POST with the next ``(status, body)`` of ``script``."""

    def __init__(self, script) -> None:
        self.script, self.calls = list(script), 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                self.rfile.read(int(self.headers["Content-Length"]))
                server.calls += 1
                status, body = server.script.pop(0) if server.script else (503, {"error": "no script left"})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _reply(message) -> dict:
    return {"choices": [{"message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}}


@pytest.mark.parametrize("message", [{"role": "assistant", "content": 42}, {"role": "assistant", "content": ["Rex"]},
                                     {"role": "assistant", "content": {"text": "Rex"}}, None, "Rex",
                                     [["content", "Rex"]]])
def test_a_reply_that_is_not_text_is_retried_and_never_cached(tmp_path, message):
    server = _Server([(200, _reply(message))] * 2)
    lm = OpenAICompatLM("m", base_url=server.url, max_retries=1, backoff_s=0.01, cache=str(tmp_path / "c.sqlite"))
    try:
        with pytest.raises(LMUnavailableError, match="malformed response body"):
            lm.generate([ChatRequest.of("hi")])
    finally:
        server.close()
    assert server.calls == 2 and len(lm.cache) == 0


def test_a_good_reply_after_a_malformed_one_is_used_and_cached(tmp_path):
    server = _Server([(200, _reply({"role": "assistant", "content": 42})),
                      (200, _reply({"role": "assistant", "content": "Rex\ud83d"}))])
    lm = OpenAICompatLM("m", base_url=server.url, max_retries=1, backoff_s=0.01, cache=str(tmp_path / "c.sqlite"))
    try:
        assert lm.generate([ChatRequest.of("hi")])[0].text == "Rex"
    finally:
        server.close()
    assert [c.text for c in lm.generate([ChatRequest.of("hi")])] == ["Rex"] and len(lm.cache) == 1


def test_null_content_is_an_empty_reply_and_nonsense_usage_is_estimated(tmp_path):
    body = {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": 7}],
            "usage": {"prompt_tokens": "many", "completion_tokens": -3}}
    server = _Server([(200, body)])
    lm = OpenAICompatLM("m", base_url=server.url, max_retries=0, cache=None)
    try:
        completion = lm.generate([ChatRequest.of("hello there")])[0]
    finally:
        server.close()
    assert completion.text == "" and completion.finish_reason is None
    assert completion.prompt_tokens >= 1 and completion.completion_tokens >= 0


def test_http_400_is_a_request_error_and_not_cached(tmp_path):
    server = _Server([(400, {"error": {"message": "bad request"}})])
    lm = OpenAICompatLM("m", base_url=server.url, max_retries=3, backoff_s=0.01, cache=str(tmp_path / "c.sqlite"))
    try:
        with pytest.raises(RequestError, match="HTTP 400: bad request"):
            lm.generate([ChatRequest.of("hi")])
    finally:
        server.close()
    assert server.calls == 1 and len(lm.cache) == 0


# -- a busy cache is busy, not broken --------------------------------------------------------------
@pytest.fixture
def locked_cache(tmp_path, monkeypatch):
    """A cache file whose write lock another connection holds, and a short busy timeout."""
    path = tmp_path / "busy.sqlite"
    ResponseCache(path).close()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("PRAGMA journal_mode=DELETE")  # a rollback journal: the lock blocks opening too
    other.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(cache_module, "_BUSY_TIMEOUT_MS", 300)
    yield path
    other.rollback()
    other.close()


def test_a_locked_cache_is_reported_busy_after_a_bounded_wait(locked_cache):
    start = time.monotonic()
    with pytest.raises(CacheError) as info:
        ResponseCache(locked_cache)
    assert 0.25 < time.monotonic() - start < 5
    message = str(info.value)
    assert "busy" in message and "another process" in message and str(locked_cache) in message
    assert "delete" not in message and "not a usable" not in message


def test_a_write_that_finds_the_cache_locked_is_reported_busy(tmp_path, monkeypatch):
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    monkeypatch.setattr(cache_module, "_BUSY_TIMEOUT_MS", 300)
    cache._conn.execute("PRAGMA busy_timeout=300")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CacheError, match="is busy") as info:
            cache.put("m", ChatRequest.of("hi"), Completion("x", 1, 1, 0.0))
        assert "delete" not in str(info.value)
    finally:
        other.rollback()
        other.close()
        cache.close()


def test_a_corrupt_cache_is_still_called_unusable(tmp_path):
    path = tmp_path / "broken.sqlite"
    path.write_bytes(b"this is not a database at all, just text " * 100)
    with pytest.raises(CacheError, match="not a usable SQLite database"):
        ResponseCache(path)
