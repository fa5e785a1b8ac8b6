"""Mnemis's System-2 selector: evidence labels on a hand-checked hierarchy, the teacher-forced
descent, the trained stage's decisions and loss, its evaluation by the descent it makes, the
recipe end to end and ``evaluate-stage`` on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import memlab.training.evaluators as evaluators
import memlab.training.selection
from memlab.config import ConfigError
from memlab.pipelines.mnemis.settings import HierarchySettings
from memlab.stage import Stage
from memlab.stages.encoder import TextEncoder
from memlab.stages.global_select import (
    GlobalSelectIn,
    GlobalSelector,
    GlobalSelectOut,
    HierarchyNode,
    Selection,
    SelectionTarget,
    TrainedGlobalSelector,
)
from memlab.training import load_recipe
from memlab.training.selection import (
    build_memories,
    descent_rows,
    evaluate_global_selector,
    evidence_episodes,
    node_labels,
    score_rows,
    selection_examples,
)
from memlab.types import Conversation, Question
from tests.pipelines.test_mnemis import Script, history, pipeline
from tests.train.test_recipes import three_conversations  # noqa: F401 (a fixture)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def minilm():
    from memlab.embed import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()
    embedder.warm_up()
    return embedder


@pytest.fixture(scope="module")
def memory(minilm):
    # Entities Ann, Bob, Rex (in both episodes), Paris (the first), Berlin (the second); layer 1:
    # Persons (Ann, Bob), Citys (Paris, Berlin), Dogs (Rex: n = 1); layer 2: Everything.
    return pipeline(Script(), minilm, hierarchy=HierarchySettings(compression_ratio=1)).build(history())


def name(memory, node: str) -> str:
    return memory.graph.node(node)["name"]


def moved() -> Conversation:
    h = history()
    question = Question("q-berlin", h.id, "Where did Ann move?", "Berlin", "single-hop", ("D2:1",))
    return Conversation(h.id, h.speakers, h.sessions, (question,))


def test_labels_skip_entities_found_everywhere_and_climb_to_the_top(memory):
    question = moved().questions[0]
    evidence = evidence_episodes(memory, question)
    assert evidence == {"episode:session_2:0"}
    positive, take_all = node_labels(memory, evidence)
    assert sorted(name(memory, n) for n in positive) == ["Berlin", "Citys", "Everything"]  # Ann, Rex: everywhere
    assert take_all == set()  # by default only when every child is positive
    _, take_all = node_labels(memory, evidence, all_children_share=0.5)
    assert [name(memory, n) for n in take_all] == ["Citys"]  # 1 of its 2 children
    positive, _ = node_labels(memory, evidence, max_share=1.0)
    assert {"Ann", "Bob", "Rex", "Berlin"} <= {name(memory, n) for n in positive}


def test_teacher_forced_descent_follows_the_positive_categories(memory):
    question = moved().questions[0]
    positive, take_all = node_labels(memory, evidence_episodes(memory, question))
    rows = descent_rows(memory, question, positive, take_all, batch_size=2)
    levels = [(level, [n.name for n in item.nodes], target.select) for item, target, level in rows]
    assert levels[0] == (0, ["Everything"], (True,))
    assert [lvl for lvl, _, _ in levels] == [0, 1, 1, 2]  # the 3 children of Everything in calls of 2
    assert sorted(n for lvl, names, _ in levels if lvl == 1 for n in names) == ["Citys", "Dogs", "Persons"]
    assert dict(zip(*levels[-1][1:])) == {"Paris": False, "Berlin": True}
    data = selection_examples({memory_id(memory): memory}, [moved()], batch_size=2)
    assert len(data) == 4 and "Label source: gold evidence" in data.info.description


def memory_id(memory) -> str:
    return history().id


class ByName(GlobalSelector):
    """Selects the nodes named in ``names`` (no call to anything)."""

    def __init__(self, names: set[str], take_all: bool = False) -> None:
        super().__init__()
        self.names, self.take_all = names, take_all

    def forward(self, batch):
        return [GlobalSelectOut(tuple(Selection(n.key, self.take_all) for n in item.nodes if n.name in self.names))
                for item in batch]


def test_evaluation_scores_the_descent_a_selector_makes(memory):
    memories, conversations = {memory_id(memory): memory}, [moved()]
    right = evaluate_global_selector(ByName({"Everything", "Citys", "Berlin"}), memories, conversations)
    assert right["entity_precision"] == right["entity_recall"] == right["evidence_episode_recall"] == 1.0
    assert right["selector_calls_per_question"] == 3 and right["episodes_reached_per_question"] == 1
    assert right["llm_calls_per_question"] == 0
    wrong = evaluate_global_selector(ByName({"Everything", "Citys", "Paris"}), memories, conversations)
    assert wrong["entity_recall"] == 0.0 and wrong["evidence_episode_recall"] == 0.0
    take_all = evaluate_global_selector(ByName({"Everything", "Citys"}, take_all=True), memories, conversations)
    assert take_all["selector_calls_per_question"] == 1 and take_all["evidence_episode_recall"] == 1.0
    assert take_all["entity_precision"] < 1.0  # everything below Everything
    scores = score_rows(ByName({"Everything", "Citys", "Berlin"}), selection_examples(memories, conversations))
    assert scores["select_f1"] == 1.0


def test_trained_selector_decides_within_its_limits_and_its_loss_goes_down():
    torch.manual_seed(0)
    nodes = (HierarchyNode("C0", "Cities", ("place",), "Cities: Paris, Berlin", 1),
             HierarchyNode("C1", "Pets", ("animal",), "Pets: Rex", 1), HierarchyNode("E2", "Berlin", ("city",), "", 0))
    item = GlobalSelectIn("Which city did Ann move to?", nodes)
    selector = TrainedGlobalSelector(TextEncoder(max_length=96, frozen=True), hidden=16, max_selected=2, min_selected=1, select_threshold=1.0)
    out = selector([item, GlobalSelectIn("nothing to choose", ())])
    assert len(out[0].selected) == 1 and out[1].selected == ()  # min_selected when nothing reaches the threshold
    assert len(selector._cache) == 4  # the question and the three cards, encoded once ...
    selector([item])
    assert len(selector._cache) == 4  # ... and met again from the cache
    target = SelectionTarget((True, False, True), (True, False, False))
    optimiser = torch.optim.Adam(selector.head.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = selector.loss(selector.node_logits([item]), [target], [item], positive_weight=2.0)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 2
    selector.select_threshold = 0.5
    chosen = selector([item])[0].selected
    assert [s.key for s in chosen] == ["C0", "E2"] or [s.key for s in chosen] == ["E2", "C0"]
    assert {s.key: s.all_children for s in chosen} == {"C0": True, "E2": False}  # never for an entity
    with pytest.raises(ValueError, match="one flag per node"):
        selector.loss(selector.node_logits([item]), [SelectionTarget((True,), (False,))], [item])
    with pytest.raises(ValueError, match="min_selected"):
        TrainedGlobalSelector(TextEncoder(), max_selected=1, min_selected=2)


def test_recipe_trains_saves_and_evaluates_the_descent(three_conversations, tmp_path, monkeypatch, minilm):
    from memlab.config import build_pipeline
    from tests.fakes import ReplayLM
    from tests.pipelines.test_no_label_in_prompts import plausible, with_lm

    recipe = load_recipe("train_global_selector")
    built = with_lm(build_pipeline(REPO / "configs" / "pipelines" / "mnemis.yaml")[0], ReplayLM(plausible))
    built.embedder = minilm
    monkeypatch.setattr(evaluators, "build_pipeline", lambda tree, adjust: (built, {}, {}))  # the one the evaluator builds
    # the scripted LM has no cache to replay: build with it directly
    monkeypatch.setattr(memlab.training.selection, "build_memories",
                        lambda p, conversations, source: {c.id: p.build(c.history()) for c in conversations})
    out = tmp_path / "selector"
    summary = recipe.main({
        "recipe": "train_global_selector", "output_dir": str(out), "progress": False,
        "data": {"path": str(three_conversations), "eval_ids": ["tiny-c"], "validation_ids": ["tiny-b"],
                 "max_questions": 4, "sessions": 2},
        "stage": {"_component_": "memlab.stages.global_select.TrainedGlobalSelector", "hidden": 16,
                  "encoder": {"_component_": "memlab.stages.encoder.TextEncoder", "max_length": 32, "frozen": True}},
        "optim": {"epochs": 2, "batch_size": 1, "max_steps": 2},
        "eval_every": 1,
    })
    assert summary["split"] == {"train": ["tiny-a"], "validation": ["tiny-b"], "evaluation": ["tiny-c"]}
    assert summary["steps"] == 2 and summary["evaluation"]["questions"] >= 1
    assert summary["evaluation"]["llm_calls_per_question"] == 0
    record = json.loads((out / "training.json").read_text())
    assert record["evaluation"] == summary["evaluation"] and record["config"]["data"]["sessions"] == 2
    assert Stage.load(out).trained_on == {"tiny-a", "tiny-b"}


def test_build_memories_without_a_cached_build_names_the_command(three_conversations, minilm, tmp_path):
    from memlab.config import build_pipeline
    from memlab.training.recipes import training_conversations

    cache = tmp_path / "empty.sqlite"
    built = build_pipeline(REPO / "configs" / "pipelines" / "mnemis_replay.yaml",
                           [f"entity_extractor.lm.lm.cache={cache}"])[0]
    built.embedder = minilm
    conversation = training_conversations(three_conversations, ["tiny-a"], sessions=1)
    with pytest.raises(ValueError, match=r"tiny-a \(1 sessions\): its Mnemis build is not in the response cache.*"
                                         r"time_build.py"):
        build_memories(built, conversation)
    live = build_pipeline(REPO / "configs" / "pipelines" / "mnemis.yaml")[0]
    with pytest.raises(ConfigError, match=r"mnemis.yaml: the Mnemis build's entity_extractor, describer, "
                                          r"fact_extractor, categorizer would call a model"):
        build_memories(live, conversation, "mnemis.yaml")


def test_evaluate_stage_refuses_a_selector_without_evaluator_or_cached_build(tmp_path, caplog, monkeypatch):
    from memlab.cli import main
    from memlab.training.selection import GlobalSelectorEvaluator

    TrainedGlobalSelector(TextEncoder(frozen=True), hidden=8).save(tmp_path / "selector")
    assert main(["evaluate-stage", str(tmp_path / "selector")]) == 2
    assert "records no evaluator" in caplog.text
    record = {"config": {}, "evaluator": GlobalSelectorEvaluator().node(), "split": {"train": [], "validation": []}}
    (tmp_path / "selector" / "training.json").write_text(json.dumps(record))
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "empty.sqlite"))
    assert main(["evaluate-stage", str(tmp_path / "selector"), "--sessions", "1",
                 f"pipeline={REPO / 'configs' / 'pipelines' / 'mnemis_replay.yaml'}"]) == 2
    assert "not in the response cache" in caplog.text
    assert main(["evaluate-stage", str(tmp_path / "selector"), "--sessions", "1",
                 f"pipeline={REPO / 'configs' / 'pipelines' / 'mnemis.yaml'}"]) == 2
    assert "would call a model" in caplog.text


def test_the_selection_comparison_refuses_a_build_the_cache_lacks(tmp_path, monkeypatch, caplog):
    from memlab.cli import main

    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "empty.sqlite"))
    config = str(REPO / "configs" / "compare" / "mnemis_selection.yaml")
    assert main(["compare-stages", config, "--sessions", "1", "--data",
                 str(REPO / "memlab" / "data" / "samples" / "sample_locomo.json"), "--conversations", "sample-1",
                 f"evaluator.pipeline={REPO / 'configs' / 'pipelines' / 'mnemis_replay.yaml'}"]) == 2
    assert "not in the response cache" in caplog.text
    assert main(["compare-stages", config, "--data", "nowhere.json", "--conversations", "x"]) == 2
