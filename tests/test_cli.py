"""The ``memlab`` command end to end: the baselines on the embedded sample."""

import json
from pathlib import Path

import pytest

from memlab.cli import main

REPO = Path(__file__).resolve().parents[1]
SMALL_LM = ["answerer.lm.model=smollm2-135m-instruct-q4_1", "answerer.lm.n_ctx=4096", "answerer.lm.cache=null"]


def test_retrieval_only_run_on_the_sample_loads_no_llm(tmp_path, capsys):
    code = main(["run", str(REPO / "configs/pipelines/rag_turns.yaml"), "--retrieval-only", "--no-progress",
                 "--out", str(tmp_path), "answerer.lm.model=/nonexistent/model.gguf"])
    # the model path does not exist: the run only succeeds because nothing loads the LLM
    assert code == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["data"] == "embedded sample" and metrics["retrieval_only"] is True
    assert metrics["overall"]["recall@10"] > 0.3
    assert (tmp_path / "config.yaml").read_text().count("rag.RAG") == 1
    assert "overall (1-4)" in capsys.readouterr().out


def test_bad_invocations_fail_with_a_message(tmp_path, caplog):
    assert main(["run", str(REPO / "configs/pipelines/rag_turns.yaml"), "top_kk=3", "--out", str(tmp_path)]) == 2
    assert "has no argument 'top_kk'" in caplog.text
    assert main(["run", str(REPO / "configs/pipelines/rag_turns.yaml"), "--data", str(tmp_path / "nope.json"),
                 "--out", str(tmp_path)]) == 2
    assert "nope.json" in caplog.text
    assert main(["run", str(REPO / "configs/pipelines/rag_turns.yaml"), "--conversations", "conv-x",
                 "--out", str(tmp_path)]) == 2
    # more in test_cli_misuse.py


def test_sessions_cuts_the_history_and_the_questions(tmp_path):
    code = main(["run", str(REPO / "configs/pipelines/rag_turns.yaml"), "--retrieval-only", "--no-progress",
                 "--sessions", "2", "--out", str(tmp_path)])
    assert code == 0
    rows = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert rows and all(e.startswith(("D1:", "D2:")) for row in rows for e in row["evidence"])
    assert all(ids[0].startswith(("D1:", "D2:")) for row in rows for ids in row["retrieved"])
    assert json.loads((tmp_path / "metrics.json").read_text())["sessions"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("config", ["rag.yaml", "rag_turns.yaml", "fullcontext.yaml"])
def test_baseline_answers_with_a_real_small_model(config, tmp_path):
    code = main(["run", str(REPO / "configs/pipelines" / config), "--max-questions", "2", "--no-progress",
                 "--out", str(tmp_path), *SMALL_LM])
    assert code == 0
    rows = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert isinstance(row["prediction"], str) and row["error"] is None
        assert row["usage"]["llm_calls"] >= 1 and row["usage"]["prompt_tokens"] > 0
        assert row["context_tokens"] > 0 and row["retrieved"]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["overall"]["f1_amem"] is not None
    assert metrics["usage"]["query"]["llm_calls"] >= 2


def test_models_lists_the_known_models(capsys):
    assert main(["models"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    names = {row["name"] for row in rows}
    assert {"qwen2.5-coder-1.5b-instruct-q4_k_m", "smollm2-135m-instruct-q4_1"} <= names
    assert sum(row["default"] for row in rows) == 1


def test_evaluate_stage_prints_router_metrics(capsys):
    assert main(["evaluate-stage", str(REPO / "checkpoints/router-minilm")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["stage"] == "QueryRouter" and result["data"] == "embedded sample"
    assert 0.0 <= result["accuracy"] <= 1.0 and 0.0 <= result["accuracy_5way"] <= 1.0
    assert sum(sum(row.values()) for row in result["confusion"].values()) == result["questions"]


@pytest.mark.slow
def test_evaluate_stage_prints_reranker_recall(capsys):
    assert main(["evaluate-stage", str(REPO / "checkpoints/reranker-minilm-turns"), "depth=20"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["reranked"]) == {"recall@1", "recall@5", "recall@10", "recall@20"}
    assert result["reranked"]["recall@20"] == pytest.approx(result["first_stage"]["recall@20"])  # same 20 units


def test_evaluate_stage_and_train_refuse_bad_input(tmp_path, caplog):
    assert main(["evaluate-stage", str(tmp_path)]) == 2
    assert "not a saved stage" in caplog.text
    assert main(["train", "finetune_router", "--config", str(REPO / "configs/train/reranker.yaml")]) == 2
    assert "not 'finetune_router'" in caplog.text


def test_evaluate_stage_refuses_the_conversations_the_checkpoint_learnt_from(tmp_path, capsys, caplog):
    from memlab.stages.route.rules import RuleRouter
    from memlab.training.route import RouterEvaluator

    checkpoint = RuleRouter().save(tmp_path / "router")
    split = {"train": ["sample-1"], "validation": ["conv-47"], "evaluation": ["conv-26", "conv-30"]}
    record = {"config": {}, "evaluator": RouterEvaluator().node(), "split": split}
    (checkpoint / "training.json").write_text(json.dumps(record))
    assert main(["evaluate-stage", str(checkpoint)]) == 2  # as memlab run refuses
    assert "learnt from" in caplog.text and "sample-1" in caplog.text
    assert main(["evaluate-stage", str(checkpoint), "--allow-training-overlap"]) == 0
    assert json.loads(capsys.readouterr().out)["overlaps_training"] == ["sample-1"]

    split["train"] = ["conv-41"]
    (checkpoint / "training.json").write_text(json.dumps(record))
    assert main(["evaluate-stage", str(checkpoint)]) == 0
    assert json.loads(capsys.readouterr().out)["overlaps_training"] == []


def test_evaluate_stage_rebuilds_the_evaluator_the_checkpoint_recorded(tmp_path, capsys, caplog):
    from memlab.stages.route.rules import RuleRouter

    assert main(["evaluate-stage", str(REPO / "checkpoints/router-tfidf")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["evaluator"]["_component_"] == "memlab.training.route.RouterEvaluator"
    assert result["stage"] == "TfidfRouter" and 0.0 <= result["accuracy"] <= 1.0
    checkpoint = RuleRouter().save(tmp_path / "router")  # saved in code: no training record
    assert main(["evaluate-stage", str(checkpoint)]) == 2
    assert "records no evaluator" in caplog.text
    (checkpoint / "training.json").write_text(json.dumps({"config": {}, "evaluator": {
        "_component_": "memlab.training.rerank.RerankerEvaluator"}, "split": {"train": [], "validation": []}}))
    assert main(["evaluate-stage", str(checkpoint)]) == 2  # a router is no reranker
    assert "RerankerEvaluator scores Reranker stages, not RuleRouter" in caplog.text


def test_batch_size_is_checked_and_a_batched_retrieval_run_matches_the_unbatched_one(tmp_path, capsys):
    config = str(REPO / "configs/pipelines/rag_turns.yaml")
    with pytest.raises(SystemExit) as exit_:
        main(["run", config, "--batch-size", "0", "--out", str(tmp_path / "bad")])
    assert exit_.value.code == 2 and "positive integer" in capsys.readouterr().err
    for name, size in (("one", "1"), ("four", "4")):
        assert main(["run", config, "--retrieval-only", "--no-progress", "--batch-size", size,
                     "--out", str(tmp_path / name)]) == 0
    rows = {name: [json.loads(line)["retrieved_units"] for line in (tmp_path / name / "predictions.jsonl").open()]
            for name in ("one", "four")}
    assert rows["one"] == rows["four"] and len(rows["one"]) > 4


def test_a_run_whose_questions_failed_exits_1_with_one_summary_line(tmp_path, capsys, monkeypatch):
    from memlab.pipelines.rag import RAG

    def broken(self, memory, queries):
        raise RuntimeError("retrieval broke")

    monkeypatch.setattr(RAG, "retrieve_many", broken)
    code = main(["run", str(REPO / "configs/pipelines/rag_turns.yaml"), "--retrieval-only", "--no-progress",
                 "--max-questions", "3", "--out", str(tmp_path / "run")])
    assert code == 1
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all("retrieval broke" in row["error"] for row in rows)  # written all the same
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"3 questions failed (see {tmp_path / 'run' / 'predictions.jsonl'}, {tmp_path / 'run' / 'metrics.json'})"]


def test_a_run_whose_build_failed_exits_1_and_names_the_conversation(tmp_path, capsys, monkeypatch):
    from memlab.pipelines.rag import RAG

    def broken(self, conversation):
        raise RuntimeError("segmenter broke")

    monkeypatch.setattr(RAG, "build", broken)
    code = main(["run", str(REPO / "configs/pipelines/rag_turns.yaml"), "--retrieval-only", "--no-progress",
                 "--out", str(tmp_path / "run")])
    assert code == 1
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["build_errors"]
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("1 build (sample-1) failed (see ")


def test_the_failure_summary_names_everything_that_failed():
    from memlab.cli import _failure_summary

    assert _failure_summary({"failed_questions": 0, "build_errors": {}, "stopped": None, "failures": {"x": 2}}) is None
    assert _failure_summary({"failed_questions": 1, "build_errors": {"conv-26": "E", "conv-30": "E"}}) == \
        "1 question and 2 builds (conv-26, conv-30) failed"
    assert _failure_summary({"failed_questions": 0, "build_errors": {}, "stopped": "answering q1: server down"}) == \
        "run stopped early: answering q1: server down"
