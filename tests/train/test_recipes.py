"""The reranker, router and traversal-policy recipes on a tiny config.

Data: three conversations made from the embedded sample (one for training, one for
validation, one held out), a few questions each, so a recipe runs end to end in seconds
with the real packaged MiniLM. Each recipe is run through ``main`` (checkpoint, metrics log,
``training.json``), and its loss is checked to go down over a few steps on a fixed batch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from memlab.config import ConfigError
from memlab.stage import Stage
from memlab.training import EarlyStopping, load_recipe, load_recipe_config, recipe_path

SAMPLE = Path(__file__).resolve().parents[2] / "memlab" / "data" / "samples" / "sample_locomo.json"
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "train"


@pytest.fixture(scope="module")
def three_conversations(tmp_path_factory) -> Path:
    sample = json.loads(SAMPLE.read_text())[0]
    data = [{**sample, "sample_id": name} for name in ("tiny-a", "tiny-b", "tiny-c")]
    path = tmp_path_factory.mktemp("data") / "tiny_locomo.json"
    path.write_text(json.dumps(data))
    return path


def tiny_data(path: Path) -> dict:
    return {"path": str(path), "eval_ids": ["tiny-c"], "validation_ids": ["tiny-b"], "max_questions": 8}


def test_recipes_are_found_and_configs_load():
    for name in ("finetune_reranker", "finetune_router", "train_traversal_policy", "distill_stage"):
        assert recipe_path(name).is_file()
    for config in CONFIGS.glob("*.yaml"):
        assert load_recipe_config(config)["recipe"]
    with pytest.raises(ConfigError, match="no recipe"):
        recipe_path("no_such_recipe")
    with pytest.raises(ConfigError, match="plain identifier"):
        recipe_path("../evil")


def test_early_stopping():
    stopper = EarlyStopping(patience=2)
    assert stopper.step(0.5) and not stopper.step(0.5) and not stopper.should_stop
    assert not stopper.step(0.4) and stopper.should_stop


def fixed_batch_loss_drops(loss_fn, optimizer, steps: int = 5) -> tuple[float, float]:
    first = last = None
    for _ in range(steps):
        loss = loss_fn()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first
        last = loss.item()
    return first, loss_fn().item()


@pytest.mark.slow
def test_reranker_recipe(three_conversations, tmp_path):
    recipe = load_recipe("finetune_reranker")
    config = load_recipe_config(CONFIGS / "reranker.yaml", [
        f"output_dir={tmp_path / 'reranker'}", "stage.lora_rank=4", "stage.max_length=64", "optim.max_steps=4",
        "optim.batch_size=2", "optim.lr=1e-3", "eval_every=2", "negatives=3", "progress=false",
    ])
    config["data"] = tiny_data(three_conversations)
    summary = recipe.main(config)
    assert summary["split"] == {"train": ["tiny-a"], "validation": ["tiny-b"], "evaluation": ["tiny-c"]}
    assert 0.0 <= summary["evaluation"]["reranked"]["recall@10"] <= 1.0
    assert summary["pairs_per_second"] > 0
    log = [json.loads(line) for line in (tmp_path / "reranker.metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [0, 2, 4]
    loaded = Stage.load(tmp_path / "reranker")
    assert (tmp_path / "reranker" / "training.json").is_file()
    assert (tmp_path / "reranker" / "model.safetensors").stat().st_size < 2_000_000  # LoRA + head only
    assert type(loaded).__name__ == "CrossEncoderReranker"

    run = recipe.setup(config)
    stage = run.accelerator.unwrap_model(run.stage)
    batch = run.groups[:2]
    first, after = fixed_batch_loss_drops(lambda: recipe.group_loss(stage, batch), run.optimizer)
    assert after < first


@pytest.mark.slow
def test_router_recipe(three_conversations, tmp_path):
    recipe = load_recipe("finetune_router")
    config = load_recipe_config(CONFIGS / "router.yaml", [
        f"output_dir={tmp_path / 'router'}", "stage.lora_rank=4", "optim.epochs=2", "optim.batch_size=4",
        "progress=false",
    ])
    config["data"] = tiny_data(three_conversations)
    summary = recipe.main(config)
    evaluation = summary["evaluation"]
    assert set(evaluation) >= {"accuracy", "accuracy_5way", "confusion"}
    assert set(summary["evaluation_heads"]) == {"question_type", "intent", "complexity"}
    assert len((tmp_path / "router.metrics.jsonl").read_text().splitlines()) == 2  # one line per epoch
    assert type(Stage.load(tmp_path / "router")).__name__ == "QueryRouter"

    run = recipe.setup(config)
    stage = run.accelerator.unwrap_model(run.stage)
    batch = run.examples[:8]
    first, after = fixed_batch_loss_drops(
        lambda: stage.loss(stage.logits([r["question"] for r in batch]), recipe.targets(stage, batch)), run.optimizer
    )
    assert after < first


@pytest.mark.slow
def test_traversal_policy_recipe(three_conversations, tmp_path):
    recipe = load_recipe("train_traversal_policy")
    config = load_recipe_config(CONFIGS / "traversal_policy.yaml", [
        f"output_dir={tmp_path / 'policy'}", "optim.epochs=1", "progress=false",
    ])
    config["data"] = tiny_data(three_conversations)
    summary = recipe.main(config)
    assert summary["walks"] > 0
    assert set(summary["evaluation"]) == {"recall@10_initial", "recall@10_trained", "questions"}
    assert type(Stage.load(tmp_path / "policy")).__name__ == "TraversalPolicy"

    run = recipe.setup(config)
    walks = [w for w in run.walks if recipe.walk_loss(run.policy, w) is not None][:3]
    assert walks, "no training walk offers an evidence node among its beam candidates"
    first, after = fixed_batch_loss_drops(lambda: torch.stack([recipe.walk_loss(run.policy, w) for w in walks]).mean(),
                                          run.optimizer)
    assert after < first
