"""``memlab sweep``: rows of one table on one question set, resumable, one report (real SmolLM2-135M
answering through a response cache on tmp_path, the embedded sample's first questions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import memlab.eval.runner as runner
from memlab.cli import main
from memlab.eval.sweep import SweepError, load_sweep, run_sweep, sweep_status

REPO = Path(__file__).resolve().parents[2]
PIPELINES = REPO / "configs" / "pipelines"


@pytest.fixture(scope="module")
def small_lm(tmp_path_factory, llama_cpp_works) -> dict:
    """SmolLM2-135M through one response cache for the module: later tests replay the earlier ones' calls."""
    return {"_component_": "memlab.lm.llamacpp.LlamaCppLM", "model": "smollm2-135m-instruct-q4_1", "n_ctx": 2048,
            "n_threads": 1, "cache": str(tmp_path_factory.mktemp("sweep-cache") / "cache.sqlite")}


def sweep_file(tmp_path: Path, lm: dict, questions: dict | None = None, **rows) -> Path:
    """Two rows by default: RAG over turns with top 3 and top 5, answered and judged by ``lm``."""
    tree = {
        "questions": questions or {"categories": ["single-hop", "temporal"], "max_questions": 3},
        "judge": {"_component_": "memlab.eval.judge.CorrectWrongJudge", "lm": lm, "max_tokens": 8},
        "rows": rows or {
            "top3": {"label": "turn RAG, top 3", "config": str(PIPELINES / "rag_turns.yaml"),
                     "overrides": {"top_k": 3, "answerer.lm": lm, "answerer.max_tokens": 12}},
            "top5": {"label": "turn RAG, top 5", "config": str(PIPELINES / "rag_turns.yaml"),
                     "overrides": {"top_k": 5, "answerer.lm": lm, "answerer.max_tokens": 12}},
        },
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


@pytest.mark.slow
def test_a_sweep_runs_every_row_on_the_same_questions_into_one_report(tmp_path, small_lm):
    sweep = load_sweep(sweep_file(tmp_path, small_lm))
    statuses = run_sweep(sweep, tmp_path / "out")
    assert [(s.name, s.state) for s in statuses] == [("top3", "complete"), ("top5", "complete")]
    rows = {name: [json.loads(line) for line in (tmp_path / "out" / name / "predictions.jsonl").open()]
            for name in ("top3", "top5")}
    assert [r["question_id"] for r in rows["top3"]] == [r["question_id"] for r in rows["top5"]]
    assert len(rows["top3"]) == 3 and {r["category"] for r in rows["top3"]} == {"single-hop"}
    for name, top_k in (("top3", 3), ("top5", 5)):
        config = yaml.safe_load((tmp_path / "out" / name / "config.yaml").read_text())
        assert config["top_k"] == top_k
        assert config["eval"]["judge"]["_component_"] == "memlab.eval.judge.CorrectWrongJudge"  # the file's judge
        assert all(r["judge"] in (0.0, 1.0) for r in rows[name])
    report = (tmp_path / "out" / "report" / "report.md").read_text()
    assert "top3" in report and "top5" in report
    group = (tmp_path / "out" / "group.md").read_text()  # the headline group, in the file's order
    assert group.index("| turn RAG, top 3 | 3 |") < group.index("| turn RAG, top 5 | 3 |")
    assert "Best row by judge: turn RAG, top" in group and "formed (sample-1)" in group


@pytest.mark.slow
def test_an_interrupted_sweep_keeps_finished_rows_and_resumes_the_rest(tmp_path, small_lm, monkeypatch):
    sweep = load_sweep(sweep_file(tmp_path, small_lm))
    real = runner.run_benchmark
    calls: list[str] = []

    def interrupted_second_row(pipeline, conversations, staging, *args, **kwargs):
        calls.append(staging.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(pipeline, conversations, staging, *args, **kwargs)

    monkeypatch.setattr(runner, "run_benchmark", interrupted_second_row)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, tmp_path / "out")
    assert [s.state for s in sweep_status(sweep, tmp_path / "out")] == ["complete", "not started"]
    first = (tmp_path / "out" / "top3" / "metrics.json").read_bytes()

    monkeypatch.setattr(runner, "run_benchmark", real)
    statuses = run_sweep(sweep, tmp_path / "out")
    assert [s.state for s in statuses] == ["complete", "complete"]
    assert (tmp_path / "out" / "top3" / "metrics.json").read_bytes() == first  # the finished row was not rerun

    # a row whose config changed in the file is stale and runs again; the other is kept
    edited = yaml.safe_load(sweep.path.read_text())
    edited["rows"]["top5"]["overrides"]["top_k"] = 4
    sweep.path.write_text(yaml.safe_dump(edited, sort_keys=False))
    changed = load_sweep(sweep.path)
    assert [s.state for s in sweep_status(changed, tmp_path / "out")] == ["complete", "stale"]


@pytest.mark.slow
def test_a_row_stopped_midway_keeps_a_record_of_what_it_reached(tmp_path, small_lm, monkeypatch):
    """Stopped after its first answer (Ctrl-C, kill): the row's staging folder is gone, but
    ``unfinished/top5.json`` says what it reached and cost, its status says so, and the group
    shows it under the finished rows; the record goes once the row completes."""
    from memlab.embed import default_token_counter

    sweep = load_sweep(sweep_file(tmp_path, small_lm))
    real = runner.run_benchmark

    def first_answer_then_stop(pipeline, conversations, staging, options, **kwargs):
        if staging.name.startswith(".top3."):
            return real(pipeline, conversations, staging, options, **kwargs)

        def run(convs, on_rows, on_built=None, on_building=None):
            def stop_after(rows):
                on_rows(rows)
                raise KeyboardInterrupt
            yield from runner.in_process(pipeline, options, default_token_counter(), kwargs["judge"])(
                convs, stop_after, on_built)
        return real(pipeline, conversations, staging, options, **{**kwargs, "runner": run})

    monkeypatch.setattr(runner, "run_benchmark", first_answer_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, tmp_path / "out")
    out = tmp_path / "out"
    assert not list(out.glob(".top5.tmp-*"))  # the interrupted attempt's folder is removed ...
    record = json.loads((out / "unfinished" / "top5.json").read_text())  # ... and its progress kept
    assert [b["conversation_id"] for b in record["builds"]] == ["sample-1"]
    assert len(record["rows"]) == 1 and record["questions"] == {"sample-1": 3}
    assert [(s.name, s.state) for s in sweep_status(sweep, out)][1] == ("top5", "partial")
    group = (out / "group.md").read_text()
    assert "Rows not finished" in group and "| turn RAG, top 5 | sample-1 built; 1 of 3 questions answered" in group

    # the first attempt ran on another machine: its calls replay at that machine's seconds, so it stays named
    elsewhere = {"cpu": {"model": "Elsewhere CPU", "features": ["avx2"]}, "cores": 64}
    assert record["machines"] == [record["machine"]]
    (out / "unfinished" / "top5.json").write_text(json.dumps({**record, "machine": elsewhere, "machines": [elsewhere]}))
    monkeypatch.setattr(runner, "run_benchmark", real)
    assert [s.state for s in run_sweep(sweep, out)] == ["complete", "complete"]
    assert not (out / "unfinished" / "top5.json").exists() and "Rows not finished" not in (out / "group.md").read_text()
    assert json.loads((out / "top5" / "metrics.json").read_text())["machine"]["earlier_attempts"] == [elsewhere]
    assert "Elsewhere CPU (avx2; 64 cores) for top5 (in part)" in (out / "group.md").read_text()


def test_the_status_of_a_row_stopped_in_a_build_says_how_far_the_build_got(tmp_path):
    lm = {"_component_": "memlab.lm.llamacpp.LlamaCppLM", "model": "smollm2-135m-instruct-q4_1"}
    sweep = load_sweep(sweep_file(tmp_path, lm))
    out = tmp_path / "out"
    (out / "unfinished").mkdir(parents=True)
    building = {"conversation_id": "sample-1", "seconds": 90.0, "llm_calls": 1234, "prompt_tokens": 1,
                "completion_tokens": 1, "degenerate": [], "failures": {}, "reached": {"turns": 6, "of": 419}}
    (out / "unfinished" / "top5.json").write_text(json.dumps({"rows": [], "builds": [], "building": building}))
    top5 = sweep_status(sweep, out)[1]
    assert top5.state == "partial"
    assert top5.detail.startswith("0 of 3 questions answered, sample-1 part built (1,234 LLM calls, 6 of 419 turns) "
                                  "when it stopped")
    # a pipeline that does not say how far its build got
    (out / "unfinished" / "top5.json").write_text(json.dumps({"rows": [], "builds": [],
                                                               "building": {**building, "reached": None}}))
    assert "sample-1 part built (1,234 LLM calls) when it stopped" in sweep_status(sweep, out)[1].detail


def test_a_stale_staging_folder_does_not_hide_a_record_that_got_further(tmp_path):
    """A run killed before it cleaned up leaves its staging folder; a later stopped run's record
    holds more answers. The status counts the one further on, whichever it is."""
    lm = {"_component_": "memlab.lm.llamacpp.LlamaCppLM", "model": "smollm2-135m-instruct-q4_1"}
    sweep = load_sweep(sweep_file(tmp_path, lm))
    out = tmp_path / "out"
    (out / "unfinished").mkdir(parents=True)
    staging = out / ".top5.tmp-old"
    staging.mkdir()
    (staging / "predictions.jsonl.partial").write_text('{"question_id": "q1"}\n')
    (out / "unfinished" / "top5.json").write_text(json.dumps({"rows": [{}, {}], "builds": [], "building": None}))
    top5 = sweep_status(sweep, out)[1]
    assert (top5.state, top5.answered) == ("partial", 2) and "when it stopped" in top5.detail
    (staging / "predictions.jsonl.partial").write_text('{"question_id": "q1"}\n' * 3)  # a resumed run got further
    top5 = sweep_status(sweep, out)[1]
    assert (top5.answered, top5.detail) == (3, "3 of 3 questions on disk")


def test_a_rows_progress_record_keeps_every_machine_its_attempts_ran_on(tmp_path, monkeypatch):
    """Each attempt adds the machine it runs on to the record (a record older than ``machines``
    names its last one, ``machine``); a record made with another config is not the row's history."""
    import memlab.eval.machine as machine_module
    from memlab.eval.sweep import attempt_machines, record_progress

    out, staging = tmp_path / "out", tmp_path / "out" / ".top5.tmp-1"
    staging.mkdir(parents=True)
    (staging / "config.yaml").write_text("{}")
    about = {"row": "top5", "config_sha256": "abc", "questions": {"sample-1": 3}}
    old = {"cpu": {"model": "Old CPU", "features": ["avx2"]}, "cores": 2}
    (out / "unfinished").mkdir()
    (out / "unfinished" / "top5.json").write_text(json.dumps({**about, "machine": old}))
    for model in ("New CPU", "New CPU", "Third CPU"):
        monkeypatch.setattr(machine_module, "cpu_description", lambda model=model: {"model": model, "features": []})
        record_progress(about, staging, out)
    record = json.loads((out / "unfinished" / "top5.json").read_text())
    assert [m["cpu"]["model"] for m in record["machines"]] == ["Old CPU", "New CPU", "Third CPU"]
    assert record["machine"]["cpu"]["model"] == "Third CPU"
    assert attempt_machines(out / "unfinished" / "top5.json", "another config") == []
    assert attempt_machines(out / "unfinished" / "missing.json") == []


@pytest.mark.slow
def test_the_command_runs_a_sweep_and_reports_the_rows(tmp_path, small_lm, capsys, caplog):
    path = sweep_file(tmp_path, small_lm)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--status"]) == 0
    assert "top3: not started" in capsys.readouterr().out
    assert main(["sweep", str(path), "--out", str(out), "--rows", "nope,top5"]) == 2  # nothing runs
    assert "no row named nope (its rows: top3, top5)" in caplog.text
    assert main(["sweep", str(path), "--out", str(out), "--rows", "top5", "--no-progress"]) == 0
    printed = capsys.readouterr().out  # the chosen row ran; the other waits
    assert "top3: not started" in printed and "top5: complete" in printed
    assert main(["sweep", str(path), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "top3: complete" in printed and "top5: complete" in printed and str(out / "report") in printed
    assert main(["sweep", str(path), "--out", str(out), "--status"]) == 0
    assert "2 of 2 rows complete" in capsys.readouterr().out


def test_a_row_cannot_choose_its_questions_or_its_judge(tmp_path):
    lm = {"_component_": "memlab.lm.llamacpp.LlamaCppLM", "model": "smollm2-135m-instruct-q4_1"}
    rag = str(PIPELINES / "rag_turns.yaml")
    with pytest.raises(SweepError, match="row 'a' sets 'categories': a row cannot choose its questions"):
        load_sweep(sweep_file(tmp_path, lm, a={"config": rag, "categories": ["temporal"]}))
    with pytest.raises(SweepError, match="row 'a' overrides the judge"):
        load_sweep(sweep_file(tmp_path, lm, a={"config": rag, "overrides": {"eval.judge.lm.model": "x"}}))
    with pytest.raises(SweepError, match="row 'a': invalid config.*top_k"):
        load_sweep(sweep_file(tmp_path, lm, a={"config": rag, "overrides": {"top_k": 2.5}}))
    with pytest.raises(SweepError, match="questions has no key 'category'"):
        load_sweep(sweep_file(tmp_path, lm, {"category": ["temporal"]}, a={"config": rag}))
    with pytest.raises(SweepError, match="row name '../a' must be a folder name"):
        load_sweep(sweep_file(tmp_path, lm, **{"../a": {"config": rag}}))
    with pytest.raises(SweepError, match="row 'b': stands_in_for must name another row of the file, got 'c'"):
        load_sweep(sweep_file(tmp_path, lm, a={"config": rag}, b={"config": rag, "stands_in_for": "c"}))
    with pytest.raises(SweepError, match="row name 'unfinished' is the sweep's own folder"):
        load_sweep(sweep_file(tmp_path, lm, unfinished={"config": rag}))
    assert load_sweep(sweep_file(tmp_path, lm, a={"config": rag}, b={"config": rag, "stands_in_for": "a"})
                      ).rows[1].stands_in_for == "a"


def test_a_finished_row_over_other_questions_is_refused(tmp_path, monkeypatch):
    """A row folder finished over another question set (the file's questions changed since) stops
    the sweep before anything runs: one table, one question set."""
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "cache.sqlite"))
    lm = {"_component_": "memlab.lm.llamacpp.LlamaCppLM", "model": "smollm2-135m-instruct-q4_1"}
    rag = str(PIPELINES / "rag_turns.yaml")
    path = sweep_file(tmp_path, lm, {"categories": ["temporal"], "max_questions": 2}, a={"config": rag},
                      b={"config": rag, "overrides": {"top_k": 5}})
    sweep = load_sweep(path)
    folder = tmp_path / "out" / "a"
    runner.run_config(sweep.rows[0].config, sweep.row_overrides(sweep.rows[0]),
                      options=runner.RunOptions(retrieval_only=True, progress=False, categories=("temporal",),
                                                max_questions=3), out=folder)
    with pytest.raises(SweepError, match=r"row 'a' .* is a finished run over other questions than the sweep's "
                                         r"\(3 against 2; 0 missing.*1 extra, e.g. sample-1:q7"):
        run_sweep(sweep, tmp_path / "out")
    assert not (tmp_path / "out" / "b").exists()
