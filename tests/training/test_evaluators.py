"""Stage evaluators: config nodes that rebuild them, the first stage taken from its pipeline, one check of a value."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from memlab.config import ConfigError, build_pipeline, instantiate, load_config, validate
from memlab.data import load_sample
from memlab.stages.encoder import TextEncoder
from memlab.stages.rerank import CrossEncoderReranker
from memlab.stages.route.rules import RuleRouter
from memlab.training.evaluators import StageEvaluator
from memlab.training.navigation import NavigatorEvaluator
from memlab.training.relations import RelationEvaluator
from memlab.training.rerank import RerankerEvaluator
from memlab.training.retrieve import RetrieverEvaluator
from memlab.training.route import RouterEvaluator
from memlab.training.segmentation import SegmenterEvaluator
from memlab.training.selection import GlobalSelectorEvaluator
from memlab.training.supervision import evaluable_questions
from memlab.training.traversal import SlotRecallEvaluator

REPO = Path(__file__).resolve().parents[2]
RAG_TURNS = str(REPO / "configs/pipelines/rag_turns.yaml")


@pytest.mark.parametrize("evaluator", [
    RerankerEvaluator(pipeline=RAG_TURNS, pipeline_overrides=["rrf_k=20"], depth=7, ks=[1, 3]),
    RouterEvaluator(), SegmenterEvaluator(baseline_span=3), RelationEvaluator(keep_failed=True),
    NavigatorEvaluator(majority="SKIP"), GlobalSelectorEvaluator(max_share=0.4),
    SlotRecallEvaluator(slot="traverser", ks=[5, 10]), RetrieverEvaluator(pipeline=RAG_TURNS),
])
def test_an_evaluator_is_rebuilt_from_its_node(evaluator):
    node = evaluator.node()
    validate(node)
    rebuilt = instantiate(node)
    assert isinstance(rebuilt, StageEvaluator) and rebuilt.node() == node
    for name, overrides in evaluator.configs.items():  # recorded resolved: the tree, its overrides applied
        assert node[name] == load_config(getattr(evaluator, name), getattr(evaluator, overrides))
        assert node[overrides] == [] and isinstance(getattr(rebuilt, name), dict)
    settings = {k: v for k, v in node.items() if k not in evaluator.configs and k not in evaluator.configs.values()}
    assert all(getattr(rebuilt, k) == getattr(evaluator, k) for k in settings if k != "_component_")


def test_a_recorded_evaluator_keeps_its_pipeline_when_the_file_changes(tmp_path):
    config = tmp_path / "first_stage.yaml"
    config.write_text(f"_base_: {RAG_TURNS}\ncandidates: 30\n")
    node = RerankerEvaluator(pipeline=str(config), pipeline_overrides=["rrf_k=20"]).node()
    config.write_text(f"_base_: {RAG_TURNS}\ncandidates: 5\n")  # edited after the checkpoint was sealed
    recorded = instantiate(node)
    assert (recorded.pipeline["candidates"], recorded.pipeline["rrf_k"]) == (30, 20)
    first_stage = recorded.pipeline_named("pipeline", {"reranker": None, "top_k": 7})
    assert (first_stage.candidates, first_stage.rrf_k, first_stage.top_k) == (30, 20, 7)


def test_a_pipeline_node_in_an_evaluator_is_validated_with_it_and_never_built():
    pipeline = load_config(RAG_TURNS)
    evaluator = instantiate({"_component_": "memlab.training.rerank.RerankerEvaluator", "pipeline": pipeline})
    assert evaluator.pipeline == pipeline  # the node itself, for the evaluator to build when it prepares
    with pytest.raises(ConfigError, match=r"invalid config: pipeline.top_kk: memlab.pipelines.rag.RAG has no argument"):
        validate({**evaluator.node(), "pipeline": {**pipeline, "top_kk": 3}})
    with pytest.raises(ConfigError, match=r"pipeline: config file not found: .*nowhere.yaml"):
        validate({**evaluator.node(), "pipeline": "configs/pipelines/nowhere.yaml"})
    with pytest.raises(ConfigError, match="pipeline=3 must be a config file, a shipped config's name or a component node"):
        validate({**evaluator.node(), "pipeline": 3})


def test_an_evaluator_builds_its_pipeline_once(monkeypatch):
    import memlab.training.evaluators as evaluators

    built = []
    real = evaluators.build_pipeline
    monkeypatch.setattr(evaluators, "build_pipeline", lambda *a, **k: built.append(a) or real(*a, **k))
    evaluator = RerankerEvaluator(pipeline=RAG_TURNS, depth=5, max_questions=2)
    sample = load_sample()
    assert evaluator.prepare(sample) == evaluator.prepare(sample)
    assert len(built) == 1


def test_the_primary_metric_is_read_from_a_result_by_its_dotted_name():
    result = {"first_stage": {"recall@10": 0.5}, "reranked": {"recall@10": 0.75}, "questions": 4}
    assert RerankerEvaluator().primary(result) == 0.75
    assert RerankerEvaluator(metric="first_stage.recall@10").primary(result) == 0.5
    with pytest.raises(KeyError, match="no 'reranked.recall@3' in its result"):
        RerankerEvaluator(metric="reranked.recall@3").primary(result)


def test_prepared_data_is_frozen_and_a_cap_keeps_the_first_questions():
    import dataclasses

    from memlab.training.rerank import Candidates

    candidates = Candidates(({"question_id": "a"}, {"question_id": "b"}))
    assert candidates.first(1) == Candidates(({"question_id": "a"},)) and candidates.first(None) is candidates
    with pytest.raises(dataclasses.FrozenInstanceError):
        candidates.items = ()  # type: ignore[misc]


def test_a_bad_setting_is_refused_when_the_node_is_validated():
    with pytest.raises(ConfigError, match="depth=0 must be >= 1"):
        instantiate({**RerankerEvaluator().node(), "depth": 0})


def test_reranker_candidates_are_the_first_stage_pipelines_own_ranking():
    sample = load_sample()
    items = RerankerEvaluator(pipeline=RAG_TURNS, depth=20).prepare(sample)
    pipeline = build_pipeline(RAG_TURNS, ["top_k=20"])[0]  # what `memlab run --retrieval-only` ranks
    memory = pipeline.build(sample[0].history())
    questions = evaluable_questions(sample[0])
    assert [item["question_id"] for item in items.items] == [q.id for q in questions]
    for item, question in zip(items.items, questions):
        assert [u.id for u in item["candidates"]] == [r.unit.id for r in pipeline.retrieve(memory, question.as_query())[:20]]


def test_an_evaluator_refuses_a_stage_of_another_family():
    with pytest.raises(TypeError, match="RerankerEvaluator scores Reranker stages, not RuleRouter"):
        RerankerEvaluator()(RuleRouter(), load_sample())


# -- one way to check a value: the annotation, in code as in a config -----------------------------
def test_a_stage_built_in_code_is_checked_against_its_annotations():
    with pytest.raises(ValueError, match="CrossEncoderReranker: batch_size must be >= 1, got 0"):
        CrossEncoderReranker(TextEncoder(), batch_size=0)
    with pytest.raises(ValueError, match="TextEncoder: pooling must be one of 'cls', 'mean', got 'max'"):
        TextEncoder(pooling="max")
    with pytest.raises(ValueError, match="TextEncoder: max_length must be >= 8, got 4"):
        TextEncoder(max_length=4)


def test_a_checkpoint_in_the_wrong_slot_is_refused_at_validation():
    tree = load_config(RAG_TURNS, ["reranker._component_=memlab.stage.load_stage",
                                   f"reranker.path={REPO / 'checkpoints/router-tfidf'}"])
    tree.pop("eval")
    with pytest.raises(ConfigError, match=r"must be a Reranker component \(TfidfRouter is not one\)"):
        validate(tree)


def test_the_encoder_of_a_trained_stage_is_swapped_by_a_config_line():
    node = {"_component_": "memlab.stage.load_stage", "path": str(REPO / "checkpoints/event-segmenter")}
    saved = instantiate(node)
    swapped = instantiate({**node, "encoder": {"_component_": "memlab.stages.encoder.TextEncoder",
                                               "frozen": True, "max_length": 32}})
    assert saved.encoder.max_length == 128 and swapped.encoder.max_length == 32 and swapped.encoder.frozen
    heads = {k: v for k, v in saved.state_dict().items() if not k.startswith("encoder.")}
    assert heads and all(torch.equal(swapped.state_dict()[k], v) for k, v in heads.items())  # the trained heads stay
    session = load_sample()[0].sessions[0]
    assert len(swapped.predict_boundaries([session])[0]) < len(session.turns)
