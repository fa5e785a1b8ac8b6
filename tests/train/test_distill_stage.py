"""memlab/recipes/distill_stage.py: a teacher's cached calls -> a LoRA-tuned, merged local student."""

from __future__ import annotations

import json

import pytest

from memlab import training
from memlab.config import ConfigError
from memlab.data import SAMPLE_PATH
from memlab.lm.cache import ResponseCache
from memlab.lm.types import ChatRequest, Completion
from memlab.training import run_recipe
from memlab.training.causal_lm import mean_completion_loss, tokenize_pair
from memlab.training.distill import conversation_texts, distillation_dropped

SAMPLE = SAMPLE_PATH

TEACHER = "fake-teacher"
SYSTEM = "COUNT-STAGE: reply with JSON giving how many items the note mentions."
NUMBERS = ["three", "five", "seven", "two", "nine", "four", "six", "eight", "one", "ten", "eleven", "twelve"]


def load_recipe():
    return training.load_recipe("distill_stage")


def fill_cache(path) -> ResponseCache:
    """12 calls of one prompted stage by the teacher, plus calls that must not be picked."""
    cache = ResponseCache(path)
    for i, word in enumerate(NUMBERS):
        request = ChatRequest.of([{"role": "system", "content": SYSTEM},
                                  {"role": "user", "content": f"Note: Ann bought {word} apples."}], max_tokens=16)
        cache.put(TEACHER, request, Completion(text=f'{{"count": {i}}}', prompt_tokens=30, completion_tokens=6,
                                               latency_s=0.1, model=TEACHER, finish_reason="stop"))
    other_stage = ChatRequest.of([{"role": "user", "content": "Summarise: the sky is blue."}])
    cache.put(TEACHER, other_stage, Completion(text="Blue sky.", prompt_tokens=9, completion_tokens=3, latency_s=0.1))
    other_model = ChatRequest.of([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Note: none."}])
    cache.put("other-model", other_model, Completion(text='{"count": 0}', prompt_tokens=9, completion_tokens=5,
                                                     latency_s=0.1))
    return cache


def config(tmp_path, **overrides):
    base = {
        "recipe": "distill_stage",
        "output_dir": str(tmp_path / "run"),
        "seed": 0,
        "cache": str(tmp_path / "responses.sqlite"),
        "teacher_model": TEACHER,
        "match": "^COUNT-STAGE",
        "student": "smollm2-135m-instruct-q4_1",
        "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
        "optim": {"lr": 3e-3, "epochs": 2, "batch_size": 3, "max_steps": 6},
        "eval_fraction": 0.25,
        "max_length": 96,
        "eval_every": 3,
        "patience": 5,
        "precision": "no",
    }
    return {**base, **overrides}


def test_no_matching_call_is_a_clear_error(tmp_path):
    fill_cache(tmp_path / "responses.sqlite").close()
    with pytest.raises(ValueError, match="no cached call .* matches teacher_model='fake-teacher'"):
        run_recipe("distill_stage", config(tmp_path, match="^NO-SUCH-STAGE"))
    assert not (tmp_path / "run").exists() and not (tmp_path / "run.partial").exists()


def test_missing_cache_and_unknown_keys_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no response cache at"):
        run_recipe("distill_stage", config(tmp_path))
    with pytest.raises(ValueError, match="optim.learning_rate: no such setting"):
        run_recipe("distill_stage", config(tmp_path, optim={"learning_rate": 1e-3}))


def test_unknown_top_level_key_is_named(tmp_path):
    with pytest.raises(ConfigError, match="eval_evry: no such setting"):
        load_recipe().setup(config(tmp_path, eval_evry=10))


def locomo_file(tmp_path, ids=("conv-26", "conv-30", "conv-41")):
    """The embedded sample under several conversation ids, as a LoCoMo file."""
    sample = json.loads(SAMPLE.read_text())[0]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([{**sample, "sample_id": i} for i in ids]))
    return path


def test_calls_quoting_an_evaluation_conversation_are_held_out(tmp_path):
    recipe = load_recipe()
    cache = fill_cache(tmp_path / "responses.sqlite")
    held_out = recipe.excluded_conversations(recipe.ExcludedData(path=str(locomo_file(tmp_path))))
    assert [c.id for c in held_out] == ["conv-26", "conv-30"]  # FIXED_EVAL_IDS by default
    _, turn = next(iter(held_out[0].turns()))
    leaked = ChatRequest.of([{"role": "system", "content": SYSTEM},
                             {"role": "user", "content": f"Note: {turn.speaker}: {turn.text}"}], max_tokens=16)
    cache.put(TEACHER, leaked, Completion(text='{"count": 1}', prompt_tokens=30, completion_tokens=6, latency_s=0.1,
                                          model=TEACHER, finish_reason="stop"))
    cache.close()
    settings = recipe.resolve_settings(config(tmp_path))
    assert len(recipe.load_examples(settings)) == 13  # without the exclusion, the leaked call is a training example
    dataset = recipe.load_examples(settings, exclude=conversation_texts(held_out))
    assert len(dataset) == 12 and distillation_dropped(dataset)["held_out"] == 1
    assert all(turn.text not in m["content"] for row in dataset for m in row["messages"])


def test_excluded_conversations_are_checked(tmp_path):
    recipe = load_recipe()
    with pytest.raises(ConfigError, match="exclude_ids needs data.path"):
        recipe.resolve_settings(config(tmp_path, data={"exclude_ids": ["conv-26"]}))
    with pytest.raises(ConfigError, match="'conv-99'.*available: \\['conv-26', 'conv-30', 'conv-41'\\]"):
        recipe.excluded_conversations(recipe.ExcludedData(path=str(locomo_file(tmp_path)), exclude_ids=["conv-99"]))
    with pytest.raises(ConfigError, match="data.exclude: no such setting"):
        recipe.resolve_settings(config(tmp_path, data={"path": "x.json", "exclude": ["conv-26"]}))


def test_split_is_by_request_and_deterministic():
    recipe = load_recipe()
    rows = [{"messages": [{"role": "user", "content": f"q{i % 10}"}], "json_schema": "", "completion": str(i)}
            for i in range(20)]  # every request appears twice
    train, held_out = recipe.split_examples(rows, 0.2, seed=1)
    assert len(held_out) == 4 and len(train) == 16
    assert not {r["messages"][0]["content"] for r in train} & {r["messages"][0]["content"] for r in held_out}
    assert recipe.split_examples(rows, 0.2, seed=1) == (train, held_out)
    assert recipe.split_examples(rows, 0.2, seed=2)[1] != held_out  # the seed salts the split


def saved_eval_loss(tmp_path, folder) -> float:
    """The saved student's loss on the held-out calls, recomputed from the folder alone."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    recipe = load_recipe()
    settings = recipe.resolve_settings(config(tmp_path))
    _, held_out = recipe.split_examples(list(recipe.load_examples(settings)), settings.eval_fraction, settings.seed)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    rows = [tokenize_pair(tokenizer, e["messages"], e["completion"], settings.max_length) for e in held_out]
    return mean_completion_loss(model, rows, tokenizer.pad_token_id, batch_size=3)


@pytest.mark.slow
def test_distilled_student_learns_and_serves(tmp_path):
    from memlab.lm.hf import HFLM

    fill_cache(tmp_path / "responses.sqlite").close()
    summary = run_recipe("distill_stage", config(tmp_path))
    run = tmp_path / "run"
    assert summary["output"] == str(run) and not (tmp_path / "run.partial").exists()
    assert summary["examples"]["examples"] == 12 and summary["examples"]["eval"] == 3
    assert summary["steps"] == 6 and summary["examples_per_second"] > 0

    evaluations = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evaluations] == [0, 3, 6]
    assert evaluations[-1]["eval_loss"] < evaluations[0]["eval_loss"]
    assert summary["best_eval_loss"] == min(e["eval_loss"] for e in evaluations)
    record = json.loads((run / "distill.json").read_text())
    assert record["teacher_model"] == TEACHER and record["match"] == "^COUNT-STAGE"
    assert record["excluded_conversations"] == [] and record["examples"]["held_out"] == 0  # no data.path given

    assert evaluations[-1]["eval_loss"] != summary["best_eval_loss"]  # so the next check tells best from last
    assert saved_eval_loss(tmp_path, run / "model") == pytest.approx(summary["best_eval_loss"], rel=1e-3)

    student = HFLM(model=str(run / "model"), cache=None)
    request = ChatRequest.of([{"role": "system", "content": SYSTEM},
                              {"role": "user", "content": "Note: Ann bought thirteen apples."}], max_tokens=8)
    [completion] = student.generate([request])
    assert completion.completion_tokens > 0 and completion.text.strip()
