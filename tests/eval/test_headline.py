"""BENCHMARKS.md's headline table and contents are generated from the committed runs, never by hand
(``memlab headline``, ``memlab.reporting.headline``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.reporting import headline

REPO = Path(__file__).resolve().parents[2]
#: The headline's first group is the sweep's, whose questions and R@10 coverage come from the data.
needs_shared = pytest.mark.skipif(not (REPO.parent / "shared" / "data" / "locomo").is_dir(),
                                  reason="the headline reads ../shared/data (its sweep group's questions)")


@needs_shared
def test_the_committed_headline_table_is_the_generated_one(monkeypatch):
    monkeypatch.chdir(REPO)  # the command's defaults: eval/headline.yaml and BENCHMARKS.md here
    assert main(["headline", "--check"]) == 0


@needs_shared
def test_a_hand_edit_or_a_changed_run_is_caught(tmp_path, caplog):
    manifest = ["--manifest", str(REPO / "eval" / "headline.yaml")]
    benchmarks = tmp_path / "BENCHMARKS.md"
    text = (REPO / "BENCHMARKS.md").read_text()
    cell = "| 0.808 [0.75, 0.86] (2% of the turns) |"  # rag_turns_best's R@10 in the table
    benchmarks.write_text(text.replace(cell, cell.replace("0.808", "0.908"), 1))
    assert benchmarks.read_text() != text  # the edit landed in the table
    assert main(["headline", "--check", "--benchmarks", str(benchmarks), *manifest]) == 1
    assert "are not the ones" in caplog.text
    assert main(["headline", "--benchmarks", str(benchmarks), *manifest]) == 0 and benchmarks.read_text() == text


def test_the_prose_above_the_table_counts_the_sweep_rows_the_table_counts():
    """The answer paragraph is written by hand; its count of the sweep's complete rows must be the
    generated group's, or it goes stale as rows finish."""
    text = (REPO / "BENCHMARKS.md").read_text()
    prose = re.search(r"still running: (\d+) of its (\d+) rows are complete", text)
    table = re.search(r"\((\d+) of (\d+) rows complete; `memlab sweep", text)
    assert prose and table
    assert prose.groups() == table.groups()


def test_the_table_groups_runs_by_their_questions_with_intervals(tmp_path):
    for run in ("conv26-s2/rag_turns", "conv26/rag_turns"):
        shutil.copytree(REPO / "eval" / "runs" / run, tmp_path / "eval" / "runs" / run)
    rows = [{"system": "RAG", "configuration": c, "run": f"eval/runs/{r}", "command": f"memlab run {c}"}
            for c, r in (("a", "conv26-s2/rag_turns"), ("b", "conv26/rag_turns"))]
    table = headline.render(rows, tmp_path)
    assert "**conv-26, sessions 1-2, categories 1-4** (15 questions)" in table
    assert "**conv-26, all sessions, categories 1-4** (152 questions)" in table
    assert "| RAG | a | 0.457 [0.27, 0.65] |" in table and "memlab run b" in table


def test_every_row_says_what_its_memory_formed_and_how_much_its_top_10_reads(tmp_path):
    """A run with no structure block is named, not skipped; a manifest flag (a memory the current rules
    call degenerate, read from the stats its run kept) is shown; R@10 says what share of the turns the
    top 10 covers and is flagged where that is most of a short memory (issue 80)."""
    for run in ("conv26-s2/rag_turns", "conv26-s2/magma", "issue40-compassmem-prompted/compassmem_prompted"):
        shutil.copytree(REPO / "eval" / "runs" / run, tmp_path / "eval" / "runs" / run)
    (tmp_path / "shared").symlink_to(REPO.parent / "shared")  # the data the runs name, ../shared/...
    root = tmp_path / "repo"
    root.mkdir()
    (root / "eval").symlink_to(tmp_path / "eval")
    rows = [{"system": s, "configuration": s, "run": f"eval/runs/{r}", "command": "memlab run x", **extra}
            for s, r, extra in (("RAG", "conv26-s2/rag_turns", {}),
                                ("MAGMA", "conv26-s2/magma", {"flag": "0 causal edges"}),
                                ("CompassMem", "issue40-compassmem-prompted/compassmem_prompted", {}))]
    lines = {line.split(" | ")[0][2:]: line for line in headline.render(rows, root).splitlines()
             if line.startswith("| ") and not line.startswith("| system")}
    assert "| no structure recorded | `eval/runs/conv26-s2/rag_turns` |" in lines["RAG"]
    assert "| no structure recorded; **0 causal edges** |" in lines["MAGMA"]
    assert "| formed (conv-26, conv-30) |" in lines["CompassMem"]
    if (REPO.parent / "shared" / "data").is_dir():
        assert "(89% of the turns) **too few units for R@10 to mean much** **provenance wider than the text read " \
               "(18% of turns attached)**" in lines["CompassMem"]


@needs_shared
def test_bad_manifests_and_missing_markers_are_one_error(tmp_path, caplog):
    manifest = tmp_path / "eval" / "headline.yaml"
    manifest.parent.mkdir()
    benchmarks = ["--benchmarks", str(REPO / "BENCHMARKS.md")]
    manifest.write_text("- system: x\n")
    assert main(["headline", "--check", "--manifest", str(manifest), *benchmarks]) == 2
    assert "each with the strings" in caplog.text
    manifest.write_text("- {system: x, configuration: y, run: eval/runs/none, command: z}\n")
    assert main(["headline", "--check", "--manifest", str(manifest), *benchmarks]) == 2
    assert "not a finished run" in caplog.text
    (tmp_path / "B.md").write_text("no markers\n")
    assert main(["headline", "--check", "--benchmarks", str(tmp_path / "B.md"),
                 "--manifest", str(REPO / "eval" / "headline.yaml")]) == 2
    assert "needs exactly one <!-- headline:start -->" in caplog.text


def test_contents_lists_sections_outside_code_blocks():
    listed = headline.contents("# Title\n## One (issue 4): `a` b\n```\n## not a section\n```\n## Two\n")
    assert listed.splitlines()[2:4] == ["- [One (issue 4): `a` b](#one-issue-4-a-b)", "- [Two](#two)"]
    # sections nested under the parts they are in; the title is no part
    parts = headline.contents("# Title\n## Before\n# Part A\n## One\n```\n# comment\n```\n# Part B\n## Two\n#tag\n")
    assert parts.splitlines()[2:-2] == ["- [Before](#before)", "- [Part A](#part-a)", "  - [One](#one)",
                                        "- [Part B](#part-b)", "  - [Two](#two)"]


def test_a_combined_judge_is_named_by_how_it_combines_its_parts():
    from memlab.eval.judge import AgreementJudge, AnyOfJudge, CorrectWrongJudge, MagmaGraderJudge, RulesFirstJudge
    from tests.fakes import ReplayLM

    judge = RulesFirstJudge(AnyOfJudge(CorrectWrongJudge(ReplayLM([])), AgreementJudge(
        MagmaGraderJudge(ReplayLM([])), CorrectWrongJudge(ReplayLM([]), prompt="memlab/judge_states_answer"))))
    assert headline.judge_name(judge.judge_info()) == (
        "rules, then (`simplemem/judge_correct_wrong` (replay) or agreement of `magma/judge_semantic` (replay) "
        "and `memlab/judge_states_answer` (replay))")


def test_the_judge_checks_become_a_table_beside_every_judged_figure(tmp_path):
    from memlab.eval.judge import CorrectWrongJudge
    from memlab.eval.judge_audit import check_judge, load_audit_items
    from tests.eval.test_judge_check import audit_folder
    from tests.fakes import ReplayLM

    (tmp_path / "audit").mkdir()
    items = load_audit_items(audit_folder(tmp_path / "audit"))
    result = check_judge(CorrectWrongJudge(lm=ReplayLM(lambda request: '{"label": "CORRECT"}')), items)
    folder = tmp_path / "eval" / "judge_checks"
    folder.mkdir(parents=True)
    (folder / "generous.json").write_text(json.dumps(result))
    table = headline.judge_table(folder)
    assert "| `simplemem/judge_correct_wrong` (replay) | 3 | 1.000 [0.44, 1.00] (3/3) |" in table
    assert "| **yes** | `eval/judge_checks/generous.json` |" in table and "1.00 / 1.00 (2)" in table
    assert headline.judge_checks(folder) == {
        "`simplemem/judge_correct_wrong` (replay)": "gold 1.00 / vague 1.00 / specific 1.00 (n=3), **lenient**"}
    assert "Positive control" not in table  # a check made without labels has none

    from memlab.eval.labels import judge_agreement
    labelled = [{"id": f"q{n}", "category": "single-hop", "label": label, "half": half}
                for n, (label, half) in enumerate([("right", "choose"), ("right", "report"), ("wrong", "report")])]
    result["positive_control"] = judge_agreement({"items": labelled}, {"q0": True, "q1": True, "q2": True})
    (folder / "generous.json").write_text(json.dumps(result))
    table = headline.judge_table(folder)
    assert ("| `simplemem/judge_correct_wrong` (replay) | 3 (0) | 1.00 [0.34, 1.00] (2/2) | - | "
            "1.00 [0.21, 1.00] (1/1) | 0.00") in table  # accepting everything agrees no better than chance
    assert headline.judge_checks(folder)["`simplemem/judge_correct_wrong` (replay)"].endswith(
        "; labelled right answers accepted 1.00, kappa 0.00 (report half, n=2)")
    (folder / "broken.json").write_text("{")
    with pytest.raises(headline.HeadlineError, match="broken.json: not a judge check"):
        headline.judge_table(folder)
