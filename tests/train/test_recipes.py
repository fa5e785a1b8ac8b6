"""The reranker, router and traversal-policy recipes on a tiny config.

Data: three conversations made from the embedded sample (one for training, one for
validation, one held out), a few questions each, so a recipe runs end to end in seconds
with the real packaged MiniLM. Each recipe is run through ``main`` (checkpoint, metrics log,
``training.json``), and its loss is checked to go down over a few steps on a fixed batch.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

import pytest
import torch

from memlab.bounds import PositiveFloat, PositiveInt
from memlab.config import ConfigError
from memlab.stage import Stage
from memlab.training import (
    DataSettings,
    EarlyStopping,
    RecipeSettings,
    load_recipe,
    load_recipe_config,
    recipe_conversations,
    recipe_path,
    recipe_settings,
    settings_record,
)

SAMPLE = Path(__file__).resolve().parents[2] / "memlab" / "data" / "samples" / "sample_locomo.json"
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "train"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def three_conversations(tmp_path_factory) -> Path:
    sample = json.loads(SAMPLE.read_text())[0]
    data = [{**sample, "sample_id": name} for name in ("tiny-a", "tiny-b", "tiny-c")]
    path = tmp_path_factory.mktemp("data") / "tiny_locomo.json"
    path.write_text(json.dumps(data))
    return path


RECIPES = ("finetune_reranker", "finetune_router", "train_traversal_policy", "distill_stage", "train_event_segmenter",
           "train_relation_extractor", "train_explorer_policy", "train_global_selector", "finetune_retriever",
           "fit_tfidf_router", "finetune_answerer")


def tiny_data(path: Path) -> dict:
    return {"path": str(path), "eval_ids": ["tiny-c"], "validation_ids": ["tiny-b"], "max_questions": 8}


def test_recipes_are_found_and_configs_load():
    for name in RECIPES:
        assert recipe_path(name).is_file()
    for path in CONFIGS.glob("*.yaml"):
        config = load_recipe_config(path)
        recipe_settings(config, load_recipe(config["recipe"]).Settings())  # no unknown key, every value fits
    with pytest.raises(ConfigError, match="no recipe"):
        recipe_path("no_such_recipe")
    with pytest.raises(ConfigError, match="plain identifier"):
        recipe_path("../evil")


@pytest.mark.parametrize("name", RECIPES)
def test_a_mistyped_key_is_refused_with_the_known_ones(name, tmp_path):
    known = "min_count" if name == "fit_tfidf_router" else "patience"  # a recipe without early stopping
    config = {"recipe": name, "output_dir": str(tmp_path / "out"), "patiense": 3}
    with pytest.raises(ConfigError, match=rf"{name}: invalid config: patiense: no such setting \(it takes .*'{known}'"):
        load_recipe(name).setup(config)
    config = {"recipe": name, "output_dir": str(tmp_path / "out"), "optim": {"learning_rate": 0.1}}
    with pytest.raises(ConfigError, match=r"optim.learning_rate: no such setting \(it takes .*'lr'"):
        load_recipe(name).setup(config)


@dataclass
class Section:
    lr: PositiveFloat = 1.0
    epochs: PositiveInt = 2


@dataclass
class ToySettings(RecipeSettings):
    optim: Section = field(default_factory=Section)
    stage: Stage = field(default_factory=lambda: {"_component_": "memlab.stages.rerank.CrossEncoderReranker"})
    mode: Literal["a", "b"] = "a"


def test_recipe_settings_fill_sections_and_keep_component_nodes_whole():
    defaults = ToySettings()
    node = {"_component_": "memlab.stages.route.RuleRouter"}
    settings = recipe_settings({"recipe": "r", "output_dir": "o", "optim": {"lr": 0.5}, "stage": node}, defaults)
    assert isinstance(settings, ToySettings) and settings.seed == 0 and settings.optim == Section(lr=0.5, epochs=2)
    assert settings.stage == node
    assert defaults.optim == Section()  # the recipe's defaults are not changed
    assert settings_record(settings) == {"recipe": "r", "output_dir": "o", "seed": 0, "optim": {"lr": 0.5, "epochs": 2},
                                         "stage": node, "mode": "a"}  # what training.json records
    with pytest.raises(ConfigError, match=r"needs the keys \['output_dir'\]"):
        recipe_settings({"recipe": "r"}, defaults)


@pytest.mark.parametrize(("override", "message"), [
    ({"optim": {"lr": "abc"}}, r"r: invalid config: optim.lr='abc' must be a number \(Section.lr\)"),
    ({"optim": {"epochs": 2.5}}, r"r: invalid config: optim.epochs=2.5 must be an integer"),
    ({"optim": {"epochs": 0}}, r"optim.epochs=0 must be >= 1"),
    ({"seed": True}, r"r: invalid config: seed=True must be an integer"),
    ({"mode": "c"}, r"mode='c' must be one of 'a', 'b'"),
    ({"optim": 3}, r"optim=3 must be a mapping of Section's settings"),
    ({"stage": {"_component_": "memlab.bounds.Range"}}, r"stage=<memlab.bounds.Range> must be a Stage component \(Range is not one\)"),
    ({"stage": {"_component_": "memlab.stages.route.RuleRouter", "colour": 1}}, r"RuleRouter has no argument 'colour'"),
])
def test_recipe_settings_refuse_a_setting_that_does_not_fit_its_declaration(override, message):
    with pytest.raises(ConfigError, match=message):
        recipe_settings({"recipe": "r", "output_dir": "o", **override}, ToySettings())
    assert recipe_settings({"recipe": "r", "output_dir": "o", "optim": {"lr": 1}}, ToySettings()).optim.lr == 1


def test_recipe_data_errors_name_the_problem(three_conversations):
    with pytest.raises(ConfigError, match="data.path is required"):
        recipe_conversations(DataSettings())
    with pytest.raises(ConfigError, match=r"\['tiny-x'\] are not in .*available: \['tiny-a', 'tiny-b', 'tiny-c'\]"):
        recipe_conversations(DataSettings(**tiny_data(three_conversations), conversations=["tiny-a", "tiny-x"]))
    with pytest.raises(ConfigError, match=r"data.eval_ids: .*\['conv-26', 'conv-30'\] are not among"):
        recipe_conversations(DataSettings(path=str(three_conversations)))
    with pytest.raises(ConfigError, match="data.final_fit: this recipe selects on a validation conversation"):
        recipe_conversations(DataSettings(path=str(three_conversations), final_fit=True))
    with pytest.raises(ConfigError, match="set data.eval_ids=null and data.validation_ids=null"):
        recipe_conversations(DataSettings(**tiny_data(three_conversations), final_fit=True), final_fit_supported=True)
    train, validation, evaluation = recipe_conversations(DataSettings(path=str(three_conversations), final_fit=True),
                                                         final_fit_supported=True)
    assert [c.id for c in train] == ["tiny-a", "tiny-b", "tiny-c"] and validation == [] and evaluation == []


def edited_conversations(path: Path, tmp_path: Path, **questions) -> Path:
    """``path``'s conversations with the questions of some replaced (``questions[id]``: the new list)."""
    data = json.loads(path.read_text())
    for conversation in data:
        conversation["qa"] = questions.get(conversation["sample_id"].replace("-", "_"), conversation["qa"])
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(data))
    return out


def test_router_refuses_data_it_cannot_train_or_select_on(three_conversations, tmp_path):
    recipe = load_recipe("finetune_router")
    base = {"recipe": "finetune_router", "output_dir": str(tmp_path / "router")}
    no_training = edited_conversations(three_conversations, tmp_path, tiny_a=[])
    with pytest.raises(ValueError, match=r"no training questions: .*\['tiny-a'\]"):
        recipe.setup({**base, "data": {**tiny_data(three_conversations), "path": str(no_training)}})
    adversarial = [q for q in json.loads(three_conversations.read_text())[1]["qa"] if q["category"] == 5]
    no_accuracy = edited_conversations(three_conversations, tmp_path, tiny_b=adversarial)
    with pytest.raises(ValueError, match=r"validation conversations \['tiny-b'\] have no question of categories 1-4"):
        recipe.setup({**base, "data": {**tiny_data(three_conversations), "path": str(no_accuracy)}})
    with pytest.raises(ConfigError, match="metric='f1' must be one of 'accuracy', 'accuracy_5way'"):
        recipe.setup({**base, "validation": {"_component_": "memlab.training.route.RouterEvaluator", "metric": "f1"}})


def test_traversal_policy_refuses_zero_epochs_and_an_empty_recall(tmp_path):
    recipe = load_recipe("train_traversal_policy")
    with pytest.raises(ConfigError, match="optim.epochs=0 must be >= 1"):
        recipe.setup({"recipe": "train_traversal_policy", "output_dir": str(tmp_path), "optim": {"epochs": 0}})

    class NoPipeline:
        def replace(self, name, stage):
            return None

    from types import SimpleNamespace

    from memlab.training.traversal import RetrievalPairs, SlotRecallEvaluator

    run = SimpleNamespace(evaluator=SlotRecallEvaluator(slot="traverser", ks=[10], baseline=False))
    with pytest.raises(ValueError, match="none of the 0 questions has gold evidence"):
        recipe.recall(run, None, RetrievalPairs(NoPipeline(), ()))


def test_early_stopping():
    stopper = EarlyStopping(patience=2)
    assert stopper.step(0.5) and not stopper.step(0.5) and not stopper.should_stop
    assert not stopper.step(0.4) and stopper.should_stop


def fixed_batch_loss_drops(loss_fn, optimizer, steps: int = 5) -> tuple[float, float]:
    first = None
    for _ in range(steps):
        loss = loss_fn()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first
    return first, loss_fn().item()


@pytest.mark.slow
def test_reranker_recipe(three_conversations, tmp_path):
    recipe = load_recipe("finetune_reranker")
    config = load_recipe_config(CONFIGS / "reranker.yaml", [
        f"output_dir={tmp_path / 'reranker'}", "stage.encoder.lora_rank=4", "stage.encoder.max_length=64", "optim.max_steps=4",
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
    assert sum(f.stat().st_size for f in (tmp_path / "reranker").rglob("model.safetensors")) < 2_000_000  # LoRA + head only
    assert type(loaded).__name__ == "CrossEncoderReranker"

    run = recipe.setup(config)
    stage = run.accelerator.unwrap_model(run.stage)
    batch = run.groups[:2]
    first, after = fixed_batch_loss_drops(lambda: recipe.group_loss(stage, batch), run.optimizer)
    assert after < first
    dense = recipe.setup({**config, "validation": {**config["validation"], "pipeline_overrides": ["retrieval=dense"]}})
    assert dense.evaluator.first_stage().retrieval == "dense"  # the first stage of rag_turns_gemma / _best
    assert dense.groups and dense.validation and dense.evaluation

    # The final fit: every conversation, the configured length, the last step kept, no held-out score.
    final = recipe.main({**config, "output_dir": str(tmp_path / "final"), "data": {
        "path": str(three_conversations), "max_questions": 8, "final_fit": True}})
    assert final["split"] == {"train": ["tiny-a", "tiny-b", "tiny-c"], "validation": [], "evaluation": []}
    assert final["steps"] == 4 and final["best"] is None and final["evaluation"] is None
    assert Stage.load(tmp_path / "final").trained_on == {"tiny-a", "tiny-b", "tiny-c"}
    assert [json.loads(line)["step"] for line in (tmp_path / "final.metrics.jsonl").read_text().splitlines()] == [4]


@pytest.mark.slow
def test_retriever_recipe(three_conversations, tmp_path):
    recipe = load_recipe("finetune_retriever")
    config = load_recipe_config(CONFIGS / "retriever.yaml", [
        f"output_dir={tmp_path / 'retriever'}", "stage.encoder.lora_rank=4", "stage.encoder.max_length=48", "optim.max_steps=4",
        "optim.batch_size=4", "optim.lr=1e-3", "eval_every=2", "progress=false",
    ])
    config["data"] = tiny_data(three_conversations)
    summary = recipe.main(config)
    assert summary["split"] == {"train": ["tiny-a"], "validation": ["tiny-b"], "evaluation": ["tiny-c"]}
    assert 0.0 <= summary["evaluation"]["recall@10"] <= 1.0 and summary["evaluation"]["questions"] > 0
    log = [json.loads(line) for line in (tmp_path / "retriever.metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [0, 2, 4]
    loaded = Stage.load(tmp_path / "retriever")
    assert type(loaded).__name__ == "BiEncoderEmbedder" and loaded.trained_on == {"tiny-a", "tiny-b"}
    assert (tmp_path / "retriever" / "encoder" / "model.safetensors").stat().st_size < 1_000_000  # the LoRA adapter only

    run = recipe.setup(config)
    stage = run.accelerator.unwrap_model(run.stage)
    batch = run.groups[:4]
    first, after = fixed_batch_loss_drops(lambda: recipe.batch_loss(stage, batch, random.Random(0)), run.optimizer)
    assert after < first


def test_tfidf_router_recipe(three_conversations, tmp_path):
    recipe = load_recipe("fit_tfidf_router")
    config = load_recipe_config(CONFIGS / "router_tfidf.yaml", [f"output_dir={tmp_path / 'router'}", "optim.c_grid=[1.0,10.0]"])
    config["data"] = tiny_data(three_conversations)
    summary = recipe.main(config)
    assert summary["split"] == {"train": ["tiny-a"], "validation": ["tiny-b"], "evaluation": ["tiny-c"]}
    assert summary["selection"]["c"] in (1.0, 10.0) and summary["vocabulary"] > 10
    assert 0.0 <= summary["evaluation"]["accuracy"] <= 1.0
    loaded = Stage.load(tmp_path / "router")
    assert type(loaded).__name__ == "TfidfRouter" and loaded.trained_on == {"tiny-a", "tiny-b"}
    # fitted on its own training questions, it labels them better than chance
    from memlab.training import recipe_conversations
    from memlab.training.route import evaluate_router

    train, validation, _ = recipe_conversations(DataSettings(**config["data"]))
    assert evaluate_router(loaded, train + validation)["accuracy"] > 0.5


@pytest.mark.slow
def test_router_recipe(three_conversations, tmp_path):
    recipe = load_recipe("finetune_router")
    config = load_recipe_config(CONFIGS / "router.yaml", [
        f"output_dir={tmp_path / 'router'}", "stage.encoder.lora_rank=4", "optim.epochs=2", "optim.batch_size=4",
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


def test_adamw_gives_heads_their_own_rate_when_asked():
    from memlab.training import adamw

    stage = torch.nn.Module()
    stage.encoder = torch.nn.Linear(2, 2)
    stage.head = torch.nn.Linear(2, 1)
    stage.encoder.bias.requires_grad_(False)  # frozen parameters are left out
    one = adamw(stage, lr=1e-3, weight_decay=0.0)
    assert [(g["lr"], len(g["params"])) for g in one.param_groups] == [(1e-3, 3)]
    two = adamw(stage, lr=0.0, weight_decay=0.0, head_lr=1e-2)
    assert [(g["lr"], len(g["params"])) for g in two.param_groups] == [(0.0, 1), (1e-2, 2)]


def test_data_sessions_cut_every_conversation_or_each_to_its_own_count(three_conversations):
    from memlab.training.recipes import ConversationSettings

    whole = {c.id: len(c.sessions) for part in recipe_conversations(DataSettings(**tiny_data(three_conversations))) for c in part}
    assert min(whole.values()) >= 2
    # one count for all, or a mapping: a conversation it names with null, or does not name, stays whole
    train, validation, evaluation = recipe_conversations(DataSettings(**tiny_data(three_conversations), sessions=1))
    assert {len(c.sessions) for c in train + validation + evaluation} == {1}
    mapped = {**tiny_data(three_conversations), "sessions": {"tiny-a": 1, "tiny-b": None}}
    recipe_settings({"recipe": "r", "output_dir": "o", "data": mapped}, ConversationSettings())  # the setting's type admits it
    parts = recipe_conversations(DataSettings(**mapped))
    sessions = {c.id: len(c.sessions) for part in parts for c in part}
    assert sessions == {"tiny-a": 1, "tiny-b": whole["tiny-b"], "tiny-c": whole["tiny-c"]}
    cut = next(c for c in parts.train + parts.validation + parts.evaluation if c.id == "tiny-a")
    kept_turns = {t.id for s in cut.sessions for t in s.turns}
    assert all(set(q.evidence) <= kept_turns for q in cut.questions)
    with pytest.raises(ConfigError, match=r"data.sessions names \['tiny-x'\], which are not among"):
        recipe_conversations(DataSettings(**tiny_data(three_conversations), sessions={"tiny-x": 1}))
    with pytest.raises(ConfigError, match=r"data.sessions=\{...\} must be"):
        recipe_settings({"recipe": "r", "output_dir": "o", "data": {"sessions": {"tiny-a": 0}}}, ConversationSettings())
    assert DataSettings().sessions is None


@pytest.mark.slow
def test_answerer_recipe_resumes_after_an_interrupt_and_its_adapter_serves_the_answer_stage(
        three_conversations, tmp_path, monkeypatch):
    """SmolLM2-135M as the student over rag_turns' requests: stopped at its 4th step, started
    again, it ends as one run (log, steps); the adapter carries its split into the overlap check
    and loads into the answer stage's LM."""
    pytest.importorskip("peft")
    pytest.importorskip("gguf")
    from memlab.config import build_pipeline
    from memlab.held_out import refuse_training_overlap, trained_conversations
    from memlab.lm.hf import HFLM

    recipe = load_recipe("finetune_answerer")
    config = load_recipe_config(CONFIGS / "answerer.yaml", [
        f"output_dir={tmp_path / 'answerer'}", f"pipeline={REPO / 'configs/pipelines/rag_turns.yaml'}", "pipeline_overrides=[]",
        "student=smollm2-135m-instruct-q4_1", "lora.rank=4", "optim.max_steps=6", "optim.batch_size=2",
        "optim.lr=1e-3", "eval_every=3", "checkpoint_every=2", "validation_examples=3", "progress=false",
        "examples=null"])
    config["data"] = tiny_data(three_conversations)
    real, calls = recipe.completion_loss, []

    def stop_at_the_fourth_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(recipe, "completion_loss", stop_at_the_fourth_step)
    with pytest.raises(KeyboardInterrupt):
        recipe.main(config)
    partial = tmp_path / "answerer.partial"
    assert (partial / "state" / "resume.pt").is_file() and (partial / "examples.jsonl").is_file()
    assert not (tmp_path / "answerer").exists()
    # continues from step 3's state (saved after its validation): the dtype it writes in is not the run's identity
    summary = recipe.main({**config, "adapter_dtype": "float16"})
    assert len(calls) == 4 + 3  # then steps 4, 5 and 6 only: the first three were not trained again
    assert summary["steps"] == 6 and summary["split"]["train"] == ["tiny-a"]
    assert summary["examples"]["train"] > 0 and summary["held_out_loss"] > 0
    log = [json.loads(line) for line in (tmp_path / "answerer.metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in log] == [0, 3, 6]
    adapter = tmp_path / "answerer"
    assert {"adapter_config.json", "adapter_model.safetensors", "training.json", "README.md"} <= \
        {p.name for p in adapter.iterdir()} and not partial.exists()
    assert "| 6 |" in (adapter / "README.md").read_text()
    assert summary["adapter_dtype"] == "float16" and 0 < summary["largest_cast_change"] < 1e-3
    assert "Weights saved in float16" in (adapter / "README.md").read_text()
    assert summary["best"]["validation"]["loss"] > 0

    # selecting on generated answers: each validation answers the validation examples and scores them
    answers = recipe.main({**config, "output_dir": str(tmp_path / "by-answers"), "select_on": "answers",
                           "abstention_share": 0.0, "answer_tokens": 8, "optim": {**config["optim"], "max_steps": 3}})
    scored = [json.loads(line) for line in (tmp_path / "by-answers.metrics.jsonl").read_text().splitlines()]
    assert {"loss", "score", "answer_f1", "false_abstentions", "adversarial_abstained"} <= set(scored[0]["validation"])
    assert answers["best"]["validation"]["score"] == max(line["validation"]["score"] for line in scored)

    pipeline, _, _ = build_pipeline(REPO / "configs/pipelines/rag_turns.yaml", [])
    pipeline.answerer.lm = HFLM("smollm2-135m-instruct-q4_1", cache=None, adapter=str(adapter))
    assert trained_conversations(pipeline) == {str(adapter): frozenset({"tiny-a", "tiny-b"})}
    with pytest.raises(ValueError, match="scored on conversations they learnt from"):
        refuse_training_overlap(pipeline, ["tiny-b", "tiny-c"], allow=False)
    refuse_training_overlap(pipeline, ["tiny-c"], allow=False)
    (adapter / "training.json").unlink()  # an adapter that does not say what it learnt from
    with pytest.raises(ValueError, match="without a record of the conversations"):
        refuse_training_overlap(pipeline, ["tiny-c"], allow=False)


def test_the_answerer_validation_cap_spreads_over_the_examples():
    """LoCoMo lists its adversarial questions last: the first 100 of conv-47's were all answerable,
    so a validation that scores abstaining never saw one. The cap spreads instead."""
    spread = load_recipe("finetune_answerer").spread
    assert spread(10, 5) == [0, 2, 4, 6, 8] and spread(10, 3) == [0, 3, 6]
    assert spread(4, None) == spread(4, 9) == [0, 1, 2, 3]
    assert spread(190, 100)[-1] >= 188  # reaches the end of the list


def test_the_answerer_card_of_a_final_fit_names_its_last_loss_not_an_empty_curve(tmp_path):
    recipe = load_recipe("finetune_answerer")
    log = tmp_path / "final.metrics.jsonl"
    log.write_text('{"elapsed_s": 4367.3, "step": 180, "loss": 1.7055554}\n')
    run = SimpleNamespace(log=SimpleNamespace(path=log), settings=recipe.Settings(recipe="finetune_answerer"),
                          split={"train": ["conv-26"], "validation": [], "evaluation": []}, dropped={})
    text = recipe.card(run, {"steps": 180, "best": None, "held_out_loss": None, "examples": {"train": 9},
                             "adapter_dtype": "float16", "largest_cast_change": 1.5e-5})
    assert "training loss of its last batch 1.70556" in text
    assert "| step |" not in text and "best step" not in text and "held-out loss None" not in text
    assert "Weights saved in float16" in text and "1.5e-05" in text


def test_the_answerer_card_serves_its_own_adapter_not_another_runs_config(tmp_path):
    """The 1.5B's card said to serve it as the 0.5B's config does: the line names the run's own
    model and folder, and the retrieval it learnt from."""
    recipe = load_recipe("finetune_answerer")
    log = tmp_path / "run.metrics.jsonl"
    log.write_text('{"step": 1, "loss": 1.0}\n')
    settings = recipe.Settings(recipe="finetune_answerer", output_dir="checkpoints/answerer-x", student="qwen-x")
    run = SimpleNamespace(log=SimpleNamespace(path=log), settings=settings,
                          split={"train": ["conv-26"], "validation": [], "evaluation": []}, dropped={})
    text = recipe.card(run, {"steps": 1, "best": None, "held_out_loss": None, "examples": {"train": 9},
                             "adapter_dtype": "float16", "largest_cast_change": 0.0})
    serve = next(line for line in text.splitlines() if line.startswith("`answerer.lm:"))
    assert "model: qwen-x" in serve and "adapter: checkpoints/answerer-x" in serve
    assert "rag_turns_best_trained_answerer" not in text


def test_answerer_examples_are_made_once_per_conversation_whatever_the_split(three_conversations, tmp_path, monkeypatch):
    """A conversation's examples depend on the data and the pipeline, not on the split: a final fit
    after the split run, or a run reading another's file, retrieves nothing again; a file made
    from another pipeline is refused, not silently reused."""
    recipe = load_recipe("finetune_answerer")
    from memlab.training.answering import AnswerExample
    from memlab.training.recipes import recipe_settings

    made = []

    def examples_of(settings, conversations):
        made.append([c.id for c in conversations])
        return [AnswerExample(c.id, f"{c.id}:q{i}", "single-hop", ({"role": "user", "content": f"{c.id} {i}"},), "x")
                for c in conversations for i in range(2)]

    monkeypatch.setattr(recipe, "examples_of", examples_of)
    settings = recipe_settings(load_recipe_config(CONFIGS / "answerer.yaml", [
        f"output_dir={tmp_path / 'a'}", "examples=null"]), recipe.Settings(recipe="finetune_answerer"))
    from memlab.data import load_conversations

    a, b, c = load_conversations(str(three_conversations))
    split = recipe.cached_examples(settings, {"train": [a], "validation": [b], "evaluation": [c]}, tmp_path / "run.jsonl")
    assert made == [[a.id, b.id, c.id]] and [e.conversation_id for e in split["validation"]] == [b.id, b.id]
    final = recipe.cached_examples(settings, {"train": [a, b, c], "validation": [], "evaluation": []}, tmp_path / "run.jsonl")
    assert len(made) == 1 and final["train"] == split["train"] + split["validation"] + split["evaluation"]

    export = tmp_path / "export.jsonl.gz"
    recipe.write_examples(export, recipe.examples_key(settings), {a.id: split["train"]})
    elsewhere = recipe.cached_examples(replace(settings, examples=str(export)), {"train": [a, b]}, tmp_path / "new.jsonl")
    assert made[1:] == [[b.id]] and elsewhere["train"][:2] == split["train"]
    other = replace(settings, examples=str(export), pipeline_overrides=["top_k=3"])
    with pytest.raises(ValueError, match="made from other data or another pipeline"):
        recipe.cached_examples(other, {"train": [a]}, tmp_path / "other.jsonl")
    (tmp_path / "torn.jsonl.gz").write_bytes(b"\x1f\x8b not gzip")
    with pytest.raises(ValueError, match="cannot read the examples file"):
        recipe.cached_examples(replace(settings, examples=str(tmp_path / "torn.jsonl.gz")), {"train": [a]}, tmp_path / "x")


def test_the_committed_answerer_examples_match_the_recipe_config():
    """checkpoints/answerer-examples.jsonl.gz was made by the config's pipeline and data: its key
    is what the recipe computes now (an edited rag_turns_best would have the recipe refuse it)."""
    recipe = load_recipe("finetune_answerer")
    from memlab.training.recipes import recipe_settings

    settings = recipe_settings(load_recipe_config(CONFIGS / "answerer.yaml", []), recipe.Settings(recipe="finetune_answerer"))
    key, examples = recipe.read_examples(REPO / settings.examples)
    assert key == recipe.examples_key(settings)
    assert {c: len(e) for c, e in examples.items()} == {"conv-26": 199, "conv-30": 105, "conv-41": 193, "conv-42": 260,
                                                          "conv-43": 242, "conv-44": 158, "conv-47": 190}
