import json
import re
import shutil

import pytest

from memlab.cli import main
from memlab.data import load_sample
from memlab.eval.runner import RunOptions, run_benchmark
from memlab.fileio import OverwriteError
from memlab.pipelines.fullcontext import FullContext
from memlab.reporting import ReportError, load_runs, write_report
from memlab.reporting.paired import changed_questions, paired_difference
from memlab.reporting.runs import RunResult
from memlab.stages.answer import PromptedAnswerer
from tests.fakes import ReplayLM

PNG = b"\x89PNG\r\n\x1a\n"


def _run(folder, respond, max_questions=6):
    pipeline = FullContext(answerer=PromptedAnswerer(lm=ReplayLM(respond)), max_context_tokens=400)
    run_benchmark(pipeline, load_sample(), folder, RunOptions(max_questions=max_questions, progress=False))
    return folder


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    plain = _run(root / "plain", lambda r: "an answer")
    dated = _run(root / "dated", lambda r: "7 May 2023" if "When" in r.messages[0]["content"] else "an answer")
    return plain, dated


def test_report_writes_the_page_its_markdown_and_figures_with_the_runs_numbers(two_runs, tmp_path):
    page = write_report(two_runs, tmp_path / "report")
    folder = page.parent
    for name in ("category_f1.png", "cost_quality.png", "recall_at_k.png", "category_recall.png"):
        assert (folder / name).read_bytes().startswith(PNG), name
        assert f'src="{name}"' in page.read_text() and f"]({name})" in (folder / "report.md").read_text()
    assert not (folder / "category_judge.png").exists()  # no run was judged
    markdown = (folder / "report.md").read_text()
    html = page.read_text()
    for run in two_runs:
        metrics = json.loads((run / "metrics.json").read_text())
        overall = metrics["overall"]
        row = next(line for line in markdown.splitlines() if line.startswith(f"| {run.name} | {overall['n']} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]

        def shown(metric: str) -> str:  # the mean and its 95% interval
            ci = overall["ci"][metric]
            return f"{overall[metric]:.3f} [{ci['low']:.2f}, {ci['high']:.2f}]"

        assert cells[2] == shown("f1_locomo") and cells[3] == shown("f1_amem") and cells[8] == shown("recall@10")
        assert f"<td>{shown('f1_locomo')}</td>" in html
    assert "Adversarial questions" not in markdown  # none among the first 6 questions


def test_the_report_shows_category_5_on_its_own(tmp_path):
    run = _run(tmp_path / "abstaining", lambda r: "Not mentioned in the conversation.", max_questions=None)
    adversarial = json.loads((run / "metrics.json").read_text())["by_category"]["adversarial"]
    markdown = (write_report([run], tmp_path / "report").parent / "report.md").read_text()
    assert "## Adversarial questions (category 5: the right answer abstains)" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith(f"| abstaining | {adversarial['n']} |"))
    ci = adversarial["ci"]["abstained"]  # the detector's share, with its Wilson interval
    assert row.split(" | ")[2] == f"1.000 [{ci['low']:.2f}, {ci['high']:.2f}]" and ci["high"] == pytest.approx(1.0)


def test_paired_section_counts_the_changed_questions_with_both_answers(two_runs, tmp_path):
    plain, dated = load_runs(two_runs)
    changed = changed_questions(plain, dated, "f1_locomo")
    differing = [q for q in plain.by_question()
                 if plain.by_question()[q]["f1_locomo"] != dated.by_question()[q]["f1_locomo"]
                 and plain.by_question()[q]["category"] != "adversarial"]
    assert sorted(c["question_id"] for c in changed) == sorted(differing) and changed
    assert all(c["answer_a"] == "an answer" and c["answer_b"] == "7 May 2023" for c in changed)
    markdown = (write_report(two_runs, tmp_path / "r").parent / "report.md").read_text()
    assert f"## Questions whose f1_locomo changed: plain -> dated ({len(changed)})" in markdown
    difference = paired_difference(plain, dated, "f1_locomo")
    distinguishable = "yes" if difference.ci_low > 0 or difference.ci_high < 0 else "no"
    assert f"| [{difference.ci_low:+.3f}, {difference.ci_high:+.3f}] | {distinguishable} |" in markdown
    assert "## dated against plain: the smallest difference each category could detect" in markdown


def _result(name, scores):
    rows = tuple({"question_id": f"q{i}", "category": "single-hop", "f1_locomo": s, "prediction": str(s)}
                 for i, s in enumerate(scores))
    return RunResult(name, None, {"overall_over": "LoCoMo categories 1-4", "overall": {}, "by_category": {}}, rows)


def test_paired_difference_bootstrap_interval_and_sign_test():
    a = _result("a", [0.0] * 10)
    b = _result("b", [1.0] * 8 + [0.0] * 2)
    d = paired_difference(a, b, "f1_locomo")
    assert d.n == 10 and d.difference == pytest.approx(0.8)
    assert (d.wins, d.losses, d.ties) == (8, 0, 2)
    assert d.sign_test_p == pytest.approx(2 / 2 ** 8)  # two-sided binomial, 8 of 8
    assert d.ci_low <= 0.8 <= d.ci_high and d.ci_low > 0.3
    same = paired_difference(a, a, "f1_locomo")
    assert same.difference == 0 and same.sign_test_p == 1.0 and (same.ci_low, same.ci_high) == (0, 0)
    assert paired_difference(a, b, "judge") is None  # neither run has it


def test_runs_over_different_questions_are_refused(two_runs, tmp_path):
    fewer = _run(tmp_path / "fewer", lambda r: "x", max_questions=3)
    with pytest.raises(ReportError, match="not over the same questions as plain"):
        write_report([two_runs[0], fewer], tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field, edit", [
    ("gold", lambda row: {**row, "gold": row["gold"] + " (v2)"}),
    ("question", lambda row: {**row, "question": row["question"] + "?"}),
    ("category", lambda row: {**row, "category": "adversarial"}),
    ("audited gold", lambda row: {**row, "audited": {"gold": "corrected"}}),
])
def test_runs_that_share_ids_but_not_questions_are_refused(two_runs, tmp_path, caplog, field, edit):
    """Two versions of a data file (or errata on one run only) reuse question ids: pairing them
    would compare different questions, so the report refuses, naming the first one that differs."""
    other = tmp_path / "other"
    shutil.copytree(two_runs[1], other)
    rows = [json.loads(line) for line in (other / "predictions.jsonl").read_text().splitlines()]
    rows[2] = edit(rows[2])
    (other / "predictions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["report", str(two_runs[0]), str(other), "--out", str(tmp_path / "out")]) == 2
    assert f"share question ids but not questions: 1 of 6 differ (e.g. {rows[2]['question_id']}: its {field})" \
        in caplog.text
    assert not (tmp_path / "out").exists()


def test_bad_folders_and_outputs_get_one_clear_error(two_runs, tmp_path, caplog):
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    (interrupted / "predictions.jsonl.partial").write_text("")
    with pytest.raises(ReportError, match="no metrics.json.*interrupted"):
        write_report([interrupted], tmp_path / "out")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "metrics.json").write_text('{"overall": ')
    with pytest.raises(ReportError, match="metrics.json: unreadable"):
        write_report([broken], tmp_path / "out")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    with pytest.raises(ReportError, match="holds files that are not a memlab report"):
        write_report(two_runs, occupied)
    assert (occupied / "notes.txt").read_text() == "mine"
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OverwriteError, match="a-file is a file, so nothing can be written under it"):
        write_report(two_runs, tmp_path / "a-file" / "report")
    assert main(["report", str(two_runs[0]), str(interrupted), "--out", str(tmp_path / "cli")]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and re.search(r"interrupted: no metrics.json", errors[0])


def test_report_replaces_its_previous_report(two_runs, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", *map(str, two_runs), "--out", str(out)]) == 0
    assert main(["report", str(two_runs[1]), "--out", str(out)]) == 0
    assert "dated" in (out / "report.md").read_text() and "| plain |" not in (out / "report.md").read_text()


def test_the_committed_conv26_runs_report(tmp_path):
    from pathlib import Path

    runs = sorted(p for p in (Path(__file__).resolve().parents[2] / "eval/runs/conv26-s2").iterdir() if p.is_dir())
    assert len(runs) >= 3
    page = write_report(runs, tmp_path / "report")
    html = page.read_text()
    for run in runs:
        overall = json.loads((run / "metrics.json").read_text())["overall"]
        assert f"<td>{run.name}</td><td>{overall['n']}</td><td>{overall['f1_locomo']:.3f} [" in html  # with its interval
    assert (page.parent / "category_judge.png").read_bytes().startswith(PNG)  # these runs were judged


def test_the_report_shows_each_memorys_structure_and_flags_a_degenerate_one(tmp_path):
    from pathlib import Path

    from memlab.config import build_pipeline
    from tests.pipelines.test_no_label_in_prompts import with_lm

    config = Path(__file__).resolve().parents[2] / "configs" / "pipelines" / "rag_turns.yaml"
    pipeline = with_lm(build_pipeline(config)[0], ReplayLM(lambda r: "an answer"))
    run = tmp_path / "rag"
    run_benchmark(pipeline, load_sample(), run, RunOptions(max_questions=2, progress=False))
    metrics = json.loads((run / "metrics.json").read_text())
    structure = metrics["memory"]["sample-1"]["structure"]
    assert structure["units"] == len(list(load_sample()[0].turns())) and structure["kinds"] == {"turn": structure["units"]}
    assert structure["mean_turns_per_unit"] == 1.0 and structure["degenerate"] == []
    markdown = (write_report([run], tmp_path / "report").parent / "report.md").read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| rag | sample-1 |"))
    assert f"units={structure['units']}" in row and row.endswith("| no |")
    metrics["memory"]["sample-1"]["structure"]["degenerate"] = ["no relation edge crosses sessions"]
    (run / "metrics.json").write_text(json.dumps(metrics))
    markdown = (write_report([run], tmp_path / "report").parent / "report.md").read_text()
    assert "| DEGENERATE: no relation edge crosses sessions |" in markdown
    # a run beside it that recorded no structure (made before the blocks existed) is named, not skipped
    old = tmp_path / "old"
    shutil.copytree(run, old)
    (old / "metrics.json").write_text(json.dumps({**metrics, "memory": {}}))
    markdown = (write_report([run, old], tmp_path / "report").parent / "report.md").read_text()
    assert "| old | - | no structure recorded | unknown |" in markdown
    assert metrics["search"] == {} and "Search statistics" not in markdown  # rag_turns has no search to report
    metrics["search"] = {"questions": 2, "mean_steps": 7.5, "refined_share": 0.5, "actions": {"SKIP": 3}}
    (run / "metrics.json").write_text(json.dumps(metrics))
    markdown = (write_report([run], tmp_path / "report").parent / "report.md").read_text()
    assert "| rag | questions=2; mean_steps=7.500; refined_share=0.500; actions={'SKIP': 3} |" in markdown


def test_the_detectable_difference_per_category_comes_from_the_scores_spread():
    from memlab.reporting.paired import detectable_by_category

    a = _result("a", [0.0, 0.0, 1.0, 1.0])
    b = _result("b", [1.0, 0.0, 1.0, 0.0])  # each run's variance 1/3
    (n, mde), = detectable_by_category(a, b, "f1_locomo").values()
    assert n == 4 and mde == pytest.approx(2.8016 * (2 / 3 / 4) ** 0.5, abs=1e-3)
    flat = _result("flat", [0.5] * 4)
    assert detectable_by_category(flat, flat, "f1_locomo") == {"single-hop": (4, None)}  # no spread


def _judged_copy(run, folder, prompt_id, verdict):
    """``run`` copied into ``folder`` as if ``prompt_id`` had judged every answer ``verdict``."""
    import shutil

    shutil.copytree(run, folder)
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics["judge_info"] = {"judge_model": "llamacpp:some-model", "prompt_id": prompt_id}
    metrics["overall"]["judge"] = verdict
    (folder / "metrics.json").write_text(json.dumps(metrics))
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    (folder / "predictions.jsonl").write_text("".join(json.dumps({**row, "judge": verdict}) + "\n" for row in rows))
    return folder


def test_the_judge_is_compared_only_between_runs_the_same_judge_scored(two_runs, tmp_path):
    strict = _judged_copy(two_runs[0], tmp_path / "strict", "simplemem/judge_correct_wrong", 0.0)
    lenient = _judged_copy(two_runs[1], tmp_path / "lenient", "magma/judge_semantic", 1.0)
    also_strict = _judged_copy(two_runs[1], tmp_path / "also_strict", "simplemem/judge_correct_wrong", 1.0)
    markdown = (write_report([strict, lenient, also_strict], tmp_path / "r").parent / "report.md").read_text()
    against_lenient = markdown.split("## lenient against strict, question by question")[1].split("## ")[0]
    against_strict = markdown.split("## also_strict against strict, question by question")[1].split("## ")[0]
    assert "| judge |" not in against_lenient and "The judge is not compared" in against_lenient
    assert "magma/judge_semantic (llamacpp:some-model)" in against_lenient
    assert "| judge |" in against_strict and "The judge is not compared" not in against_strict
    assert "The judge column mixes judges" in markdown
    assert "judge simplemem/judge_correct_wrong (llamacpp:some-model)" in markdown  # the run list names it
