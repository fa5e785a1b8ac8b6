"""``memlab compare-stages``: rows of stages under one evaluator, leave-one-conversation-out, unknown ids and
training overlap refused; and what the eval/ scripts build on: a build's cost, the scripts' refusals."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.data import SAMPLE_PATH
from memlab.eval.build_cost import build_costs
from memlab.eval.scripting import ScriptError, add_build_arguments, pipeline_and_conversations

REPO = Path(__file__).resolve().parents[2]


def test_an_unknown_conversation_id_exits_before_any_model_loads(caplog):
    assert main(["compare-stages", str(REPO / "configs/compare/routers.yaml"), "--data", str(SAMPLE_PATH),
                 "--conversations", "sample-1,conv-x"]) == 2
    assert "['conv-x'] are not in it (available: ['sample-1'])" in caplog.text


def test_an_unknown_conversation_is_refused_when_the_data_is_read_before_any_model_loads():
    from memlab.data import DataError, load_conversations

    with pytest.raises((DataError, ValueError), match="conv-x"):  # eval/compassmem_teacher_cache.py reads it first
        load_conversations(SAMPLE_PATH, ["sample-1", "conv-x"])


def _build_args(config: str, conversations: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    return parser.parse_args([config, "--data", str(SAMPLE_PATH), "--conversations", conversations])


def test_a_builds_cost_is_its_seconds_and_llm_calls():
    # rag_turns builds with the embedder alone: no LLM call, one record for the one conversation
    pipeline, conversations = pipeline_and_conversations(_build_args(str(REPO / "configs/pipelines/rag_turns.yaml"),
                                                                     "sample-1"))
    (record,) = build_costs(pipeline, conversations)
    assert record["conversation"] == "sample-1" and record["llm_calls"] == 0 and record["build_seconds"] >= 0
    assert record["turns"] > 0 and "structure" in record["memory"]
    json.dumps(record)  # printable as one JSON line


def test_a_build_script_refuses_training_conversations_and_unknown_ids():
    trained = str(REPO / "configs/pipelines/compassmem_trained_construction.yaml")
    with pytest.raises(ScriptError, match="would be scored on conversations they learnt from"):  # the run's own refusal
        pipeline_and_conversations(_build_args(trained, "conv-41"))
    with pytest.raises(ScriptError, match=r"\['conv-x'\] are not in it"):
        pipeline_and_conversations(_build_args(trained, "conv-x"))


def test_first_stages_are_compared_under_one_evaluator(tmp_path, capsys):
    config = tmp_path / "retrieval.yaml"
    config.write_text(f"""# first stages
evaluator:
  _component_: memlab.training.rerank.RerankerEvaluator
  pipeline: {REPO / "configs/pipelines/rag_turns.yaml"}
  depth: 50
  ks: [1, 5, 10, 20, 50]
rows:
  bm25:
    evaluator: {{pipeline_overrides: [retrieval=bm25]}}
  hybrid:
    evaluator: {{}}
  hybrid fused with cosine:
    stage:
      _component_: memlab.stages.rerank.FusionReranker
      embedder: {{_component_: memlab.embed.SentenceTransformerEmbedder}}
""")
    out = tmp_path / "rows.json"
    assert main(["compare-stages", str(config), "--data", str(SAMPLE_PATH), "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert list(rows) == ["bm25", "hybrid", "hybrid fused with cosine"]
    for row in rows.values():
        recalls = [row["headline"][f"recall@{k}"]["value"] for k in (1, 5, 10, 20, 50)]
        assert recalls == sorted(recalls) and 0.0 < recalls[-1] <= 1.0 and row["headline"]["recall@10"]["n"] == 19
    assert rows["bm25"]["result"]["first_stage"] != rows["hybrid"]["result"]["first_stage"]
    # the reranked row's candidates are the hybrid row's: the same 50 units, so the same recall@50
    assert rows["hybrid fused with cosine"]["result"]["reranked"]["recall@50"] == \
        rows["hybrid"]["result"]["first_stage"]["recall@50"]
    assert "| hybrid fused with cosine | " in capsys.readouterr().out
    config.write_text(config.read_text().replace("depth: 50", "depth: 0"))  # refused before anything loads
    assert main(["compare-stages", str(config), "--data", str(SAMPLE_PATH)]) == 2


def three_conversations(tmp_path, names=("tiny-a", "tiny-b", "tiny-c")) -> Path:
    sample = json.loads(SAMPLE_PATH.read_text())[0]
    data = tmp_path / "three.json"
    data.write_text(json.dumps([{**sample, "sample_id": name} for name in names]))
    return data


def test_leave_one_out_trains_a_fold_per_conversation_and_scores_each_with_its_own(tmp_path, capsys):
    data = three_conversations(tmp_path)
    config = tmp_path / "routers.yaml"
    config.write_text(f"""# routers, leave-one-out
evaluator: {{_component_: memlab.training.route.RouterEvaluator}}
loco:
  trainings:
    - recipe: fit_tfidf_router
      config: {REPO / "configs/train/router_tfidf.yaml"}
      folds: {tmp_path / "folds"}
rows:
  rule:
    stage: {{_component_: memlab.stages.route.RuleRouter}}
  tfidf:
    stage:
      _component_: memlab.stage.load_stage
      path: {tmp_path / "folds"}/{{conversation}}
""")
    out = tmp_path / "rows.json"
    assert main(["compare-stages", str(config), "--data", str(data), "--loco", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert all(set(row["folds"]) == {"tiny-a", "tiny-b", "tiny-c"} for row in rows.values())
    for held in ("tiny-a", "tiny-b", "tiny-c"):  # each fold trained without its conversation
        record = json.loads((tmp_path / "folds" / held / "training.json").read_text())
        assert held not in record["split"]["train"] + record["split"]["validation"]
    assert rows["tfidf"]["headline"]["accuracy"]["n"] == 3 * 19
    assert "| tfidf |" in capsys.readouterr().out


def test_a_stage_is_not_scored_on_what_it_learnt_from(tmp_path, caplog):
    data = three_conversations(tmp_path, names=("conv-41", "conv-26"))  # router-tfidf trained on conv-41
    routers = str(REPO / "configs/compare/routers.yaml")
    assert main(["compare-stages", routers, "--data", str(data), "rows.router-minilm=null"]) == 2
    assert "learnt from" in caplog.text and "conv-41" in caplog.text
    assert main(["compare-stages", routers, "--data", str(data), "--conversations", "conv-26",
                 "rows.router-minilm=null"]) == 0
