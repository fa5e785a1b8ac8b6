"""memlab rescore: a finished run's recorded answers scored again, by the current scorers and a judge, in place."""

from __future__ import annotations

import json

import pytest
import yaml

from memlab.cli import main
from memlab.data import load_sample
from memlab.eval.judge import CorrectWrongJudge, RulesFirstJudge
from memlab.eval.rescore import RescoreError, rescore_run
from memlab.eval.runner import RunOptions, run_benchmark
from memlab.pipelines.fullcontext import FullContext
from memlab.stages.answer import PromptedAnswerer
from tests.fakes import ReplayLM


@pytest.fixture
def run(tmp_path):
    folder = tmp_path / "run"
    pipeline = FullContext(answerer=PromptedAnswerer(lm=ReplayLM(lambda r: "chemistry.")), max_context_tokens=400)
    strict = CorrectWrongJudge(ReplayLM(lambda r: '{"label": "WRONG"}'))
    run_benchmark(pipeline, load_sample(), folder, RunOptions(max_questions=8, progress=False), judge=strict)
    (folder / "config.yaml").write_text(yaml.safe_dump({"answerer": {"prompt": "x"}}))
    return folder


def test_a_run_is_rescored_from_its_rows_and_keeps_the_judge_it_was_made_with(run):
    before = json.loads((run / "metrics.json").read_text())
    assert before["overall"]["judge"] == 0.0  # the strict judge rejected everything
    rows = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    stored = [(row["f1_amem"], row["temporal_date"]) for row in rows]
    for row in rows:  # scores an older scorer wrote: rescoring recomputes them
        row["f1_amem"], row["temporal_date"] = 0.5, 0.5
    (run / "predictions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    lenient = ReplayLM(lambda r: '{"label": "CORRECT"}')
    judge = RulesFirstJudge(CorrectWrongJudge(lenient))
    node = {"_component_": "memlab.eval.judge.RulesFirstJudge", "judge": {"_component_": "x"}}
    metrics = rescore_run(run, judge, node, "configs/judges/rules_first.yaml")
    rows = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    assert [(row["f1_amem"], row["temporal_date"]) for row in rows] == stored
    by_gold = {row["gold"]: row["judge"] for row in rows}
    assert by_gold["Chemistry"] == 1.0  # states the gold: the rule accepts it
    assert by_gold["4 March 2023"] == 0.0  # a date gold: the calendar decides, and "chemistry." is no date
    assert metrics["overall"]["judge"] == pytest.approx(sum(r["judge"] for r in rows if r["category"] != "adversarial")
                                                        / sum(r["category"] != "adversarial" for r in rows))
    assert metrics["overall"]["judge"] > 0 and metrics == json.loads((run / "metrics.json").read_text())
    assert metrics["judge_info"]["then"]["prompt_id"] == "simplemem/judge_correct_wrong"
    assert metrics["rescored_from"]["judge_info"] == before["judge_info"] and metrics["rescored_from"]["judge"] == 0.0
    assert metrics["rescored_from"]["judge_config"] == "configs/judges/rules_first.yaml"
    assert yaml.safe_load((run / "config.yaml").read_text())["eval"]["judge"] == node
    # The LLM judge was asked only what the rules left: no date gold, nothing stating its gold.
    asked = " ".join(m["content"] for request in lenient.requests for m in request.messages)
    assert "Gold answer: Chemistry" not in asked and "Gold answer: 4 March 2023" not in asked
    # Re-scored again, it still names the judge the run was made with.
    again = rescore_run(run, RulesFirstJudge(CorrectWrongJudge(ReplayLM(lambda r: '{"label": "WRONG"}'))), node, "j")
    assert again["rescored_from"]["judge_info"] == before["judge_info"] and again["overall"]["judge"] < 1.0


def test_an_audited_gold_is_judged_on_its_own(run):
    rows = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    rows[0]["audited"] = {"gold": "Biology", "judge": 0.0}
    (run / "predictions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["audited"] = {}
    (run / "metrics.json").write_text(json.dumps(metrics))
    rescore_run(run, RulesFirstJudge(CorrectWrongJudge(ReplayLM(lambda r: '{"label": "WRONG"}'))), {}, "j")
    first = json.loads((run / "predictions.jsonl").read_text().splitlines()[0])
    assert first["judge"] == 1.0 and first["audited"]["judge"] == 0.0  # "chemistry." states Chemistry, not Biology
    assert json.loads((run / "metrics.json").read_text())["audited"]["questions_corrected"] == 1


def test_a_folder_that_is_not_a_finished_run_is_refused_and_the_others_are_rescored(run, tmp_path, capsys, caplog,
                                                                                    monkeypatch):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RescoreError, match="not a finished run"):
        rescore_run(tmp_path / "empty", RulesFirstJudge(CorrectWrongJudge(ReplayLM([]))), {}, "j")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "metrics.json").write_text("{}")
    (broken / "predictions.jsonl").write_text(json.dumps({"prediction": "x", "category": "single-hop"}) + "\n")
    with pytest.raises(RescoreError, match="a row has no 'question_id' field"):
        rescore_run(broken, RulesFirstJudge(CorrectWrongJudge(ReplayLM([]))), {}, "j")
    assert (broken / "metrics.json").read_text() == "{}"  # nothing written back
    (broken / "predictions.jsonl").write_text("{not json\n")
    with pytest.raises(RescoreError, match="not a finished run"):
        rescore_run(broken, RulesFirstJudge(CorrectWrongJudge(ReplayLM([]))), {}, "j")
    # The shipped config, its model replaced by a replaying one (only memlab classes are built from YAML).
    monkeypatch.setattr("memlab.config.instantiate",
                        lambda node: RulesFirstJudge(CorrectWrongJudge(ReplayLM(lambda r: '{"label": "WRONG"}'))))
    assert main(["rescore", str(tmp_path / "empty"), str(run), "--judge", "configs/judges/rules_first.yaml"]) == 2
    assert f"{run}: judge 0.125 over 8 questions" in capsys.readouterr().out  # "chemistry." states Chemistry
    assert "empty: not a finished run" in caplog.text
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["rescored_from"]["judge_config"] == "configs/judges/rules_first.yaml"
    assert yaml.safe_load((run / "config.yaml").read_text())["eval"]["judge"]["_component_"].endswith("RulesFirstJudge")
