"""``memlab compare-stages``: rows of stages under one evaluator, leave-one-conversation-out, unknown ids and
training overlap refused; and the eval/ scripts' own: time_build.py times a build."""

from __future__ import annotations

import json
from pathlib import Path

from memlab.cli import main
from memlab.data import SAMPLE_PATH
from tests.eval_scripts import eval_script

REPO = Path(__file__).resolve().parents[2]


def test_an_unknown_conversation_id_exits_before_any_model_loads(caplog):
    assert main(["compare-stages", str(REPO / "configs/compare/routers.yaml"), "--data", str(SAMPLE_PATH),
                 "--conversations", "sample-1,conv-x"]) == 2
    assert "['conv-x'] are not in it (available: ['sample-1'])" in caplog.text


def test_the_teacher_cache_script_refuses_an_unknown_conversation_before_any_model_loads(capsys):
    assert eval_script("compassmem_teacher_cache").main(["--data", str(SAMPLE_PATH), "sample-1", "conv-x"]) == 2
    assert "conv-x" in capsys.readouterr().err


def test_time_build_reports_a_builds_seconds_and_llm_calls(capsys):
    # rag_turns builds with the embedder alone: no LLM call, one line for the one conversation
    assert eval_script("time_build").main([str(REPO / "configs/pipelines/rag_turns.yaml"), "--data", str(SAMPLE_PATH),
                                       "--conversations", "sample-1"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["conversation"] == "sample-1" and line["llm_calls"] == 0 and line["build_seconds"] >= 0
    assert line["turns"] > 0 and "memory" in line


def test_time_build_refuses_training_conversations_and_unknown_ids(capsys):
    trained = str(REPO / "configs/pipelines/compassmem_trained_construction.yaml")
    assert eval_script("time_build").main([trained, "--data", str(SAMPLE_PATH), "--conversations", "conv-41"]) == 2
    assert "would be scored on conversations they learnt from" in capsys.readouterr().err  # the run's own refusal
    assert eval_script("time_build").main([trained, "--data", str(SAMPLE_PATH), "--conversations", "conv-x"]) == 2
    assert "['conv-x'] are not in it" in capsys.readouterr().err


def test_first_stages_are_compared_under_one_evaluator(tmp_path, capsys):
    config = tmp_path / "retrieval.yaml"
    config.write_text(f"""# first stages
evaluator:
  _component_: memlab.training.evaluators.RerankerEvaluator
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
evaluator: {{_component_: memlab.training.evaluators.RouterEvaluator}}
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
