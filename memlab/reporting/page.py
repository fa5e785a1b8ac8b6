"""The report itself: ``report.html`` (tables and the PNG figures it embeds) and ``report.md``,
its markdown twin for BENCHMARKS.md, written into one folder that replaces the previous report whole."""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlab.fileio import atomic_folder, refuse_writing_into, replaceable_folder_problem
from memlab.reporting import figures
from memlab.reporting.paired import changed_questions, detectable_by_category, paired_difference
from memlab.reporting.runs import ReportError, RunResult, load_runs

REPORT_FILES = ("report.html", "report.md", "category_f1.png", "category_judge.png", "category_recall.png",
                "cost_quality.png", "recall_at_k.png")
PAIRED_METRICS = ("f1_locomo", "f1_amem", "judge", "recall@10")


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    note: str = ""


def write_report(run_folders: Sequence[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Compare the runs in ``run_folders`` (the first is the reference of the paired comparisons)
    into the folder ``out``; returns the path of ``report.html``. Bad input (a folder that is not a
    finished run, runs over different questions, an ``out`` holding other files or not writable)
    raises ``ReportError`` (``OverwriteError`` for an ``out`` inside a run folder) before anything is written."""
    runs = load_runs(run_folders)
    out = Path(out)
    refuse_writing_into(out, "--out", {f"the run {run.name}": run.folder for run in runs})
    _check_out(out)
    with atomic_folder(out) as staging:
        drawn = _draw(runs, staging)
        structure, search, audited = _structure_table(runs), _search_table(runs), _audited_table(runs)
        adversarial = _adversarial_table(runs)
        tables = [_metrics_table(runs), *(table for table in (audited, adversarial) if table.rows), _category_table(runs),
                  _stage_table(runs), *(table for table in (structure, search) if table.rows)]
        for other in runs[1:]:
            tables.extend(_paired_tables(runs[0], other))
        title = f"memlab report: {', '.join(run.name for run in runs)}"
        (staging / "report.html").write_text(_html(title, runs, tables, drawn), encoding="utf-8")
        (staging / "report.md").write_text(_markdown(title, runs, tables, drawn), encoding="utf-8")
    return out / "report.html"


def _check_out(out: Path) -> None:
    problem = replaceable_folder_problem(out, REPORT_FILES, "a memlab report")
    if problem:
        raise ReportError(f"--out {problem}")


def _draw(runs: list[RunResult], folder: Path) -> dict[str, str]:
    """The figures drawn, caption by file name."""
    plans = {
        "category_f1.png": (lambda p: figures.category_bars(runs, "f1_locomo", p), "F1 (LoCoMo) by category"),
        "category_judge.png": (lambda p: figures.category_bars(runs, "judge", p), "judge by category"),
        "category_recall.png": (lambda p: figures.category_bars(runs, "recall@10", p), "recall@10 by category"),
        "cost_quality.png": (lambda p: figures.cost_quality(runs, p), "quality against cost per query"),
        "recall_at_k.png": (lambda p: figures.recall_curves(runs, p), "evidence recall@k"),
    }
    return {name: caption for name, (draw, caption) in plans.items() if draw(folder / name)}


def _metrics_table(runs: list[RunResult]) -> Table:
    table = Table("Metrics", ["run", "n", "F1 (LoCoMo)", "F1 (A-Mem)", "BLEU-1", "judge", "R@1", "R@5", "R@10",
                              "R@20", "R@tok1000", "context tokens", "tokens / query", "build LLM calls",
                              "build prompt tokens", "query LLM calls / q", "query prompt tokens", "build s",
                              "query s p50"],
                  note="Overall over LoCoMo categories 1-4 (all questions on other data), with 95% intervals "
                       "(metrics.json ci: bootstrap over questions; Wilson for a 0/1 judge). Seconds are model "
                       "time from a cold response cache."
                       + (" The judge column mixes judges (the run list names each run's): those scores are not "
                          "comparable across runs." if len({run.judge for run in runs if run.judge}) > 1 else ""))
    for run in runs:
        o, usage, timing = run.metrics["overall"], run.metrics["usage"], run.metrics["timing"]
        table.rows.append([run.name, o.get("n"), with_interval(o, "f1_locomo"), with_interval(o, "f1_amem"),
                           o.get("bleu1"), with_interval(o, "judge"), o.get("recall@1"), o.get("recall@5"),
                           with_interval(o, "recall@10"),
                           o.get("recall@20"), o.get("recall@tok1000"), _count(o.get("context_tokens")),
                           _count(usage.get("tokens_per_query")), _count(usage["build"].get("llm_calls")),
                           _count(usage["build"].get("prompt_tokens")), usage.get("llm_calls_per_query"),
                           _count(usage["query"].get("prompt_tokens")), _seconds(timing.get("build_seconds")),
                           _seconds(timing.get("query_seconds_p50"))])
    return table


def _audited_table(runs: list[RunResult]) -> Table:
    """Original and audited gold side by side, for the runs scored with an errata file."""
    table = Table("Original and audited gold (errata)", ["run", "errata", "questions corrected", "F1 (LoCoMo)",
                                                          "F1 (A-Mem)", "judge", "R@10"],
                  note="Each cell: against the original gold -> against the audited gold (memlab run --errata; "
                       "overall over the same questions).")
    for run in runs:
        audited = run.metrics.get("audited")
        if not audited:
            continue
        original = run.metrics["overall"]
        cells = [f"{_fmt(original.get(m))} -> {_fmt(audited['overall'].get(m))}"
                 for m in ("f1_locomo", "f1_amem", "judge", "recall@10")]
        table.rows.append([run.name, Path(run.metrics["errata"]["file"]).name, audited["questions_corrected"], *cells])
    return table


def _adversarial_table(runs: list[RunResult]) -> Table:
    """Category 5 on its own: does the pipeline abstain where the conversation holds no answer?"""
    table = Table("Adversarial questions (category 5: the right answer abstains)",
                  ["run", "n", "abstained (detector)", "judge (vs abstaining)", "F1 (LoCoMo: its two phrases)",
                   "false abstentions, categories 1-4"],
                  note="Not in overall, as in the papers. 'abstained': memlab.eval.abstention recognises the answer "
                       "saying the conversation does not hold it; the judge compares the answer with \"The "
                       "conversation does not mention this.\"; the official F1 accepts only \"no information "
                       "available\" / \"not mentioned\". 95% Wilson intervals.")
    for run in runs:
        block = run.metrics["by_category"].get("adversarial")
        if not block or block.get("abstained") is None:
            continue
        table.rows.append([run.name, block["n"], with_interval(block, "abstained"), with_interval(block, "judge"),
                           _fmt(block.get("f1_locomo")), with_interval(run.metrics["overall"], "abstained")])
    return table


def _category_table(runs: list[RunResult]) -> Table:
    categories = list(dict.fromkeys(c for run in runs for c in run.metrics["by_category"]))
    table = Table("By category: F1 (LoCoMo) / judge / recall@10", ["run", *[
        f"{c} (n={runs[0].metrics['by_category'].get(c, {}).get('n', 0)})" for c in categories]])
    for run in runs:
        cells = []
        for c in categories:
            block = run.metrics["by_category"].get(c, {})
            cells.append(" / ".join(with_interval(block, m) for m in ("f1_locomo", "judge", "recall@10")))
        table.rows.append([run.name, *cells])
    return table


def _stage_table(runs: list[RunResult]) -> Table:
    table = Table("Cost by stage (building and answering)", ["run", "stage", "LLM calls", "prompt tokens",
                                                             "completion tokens", "model s"])
    for run in runs:
        for stage, usage in run.metrics["usage"].get("stages", {}).items():
            table.rows.append([run.name, stage, _count(usage.get("llm_calls")), _count(usage.get("prompt_tokens")),
                               _count(usage.get("completion_tokens")), _seconds(usage.get("llm_seconds"))])
    return table


def _structure_table(runs: list[RunResult]) -> Table:
    table = Table("Memory structure (what formed, per conversation)", ["run", "conversation", "shape", "degenerate"],
                  note="Each memory's own structure block (metrics.json memory.<conversation>.structure), computed "
                       "from the built memory with no model call; 'degenerate' names what the system's defining "
                       "structure failed to form. Shown when a run records one; a run beside it without one "
                       "(made before structure blocks existed, or a pipeline with nothing to form) says so.")
    recorded = any(isinstance(stats, dict) and stats.get("structure")
                   for run in runs for stats in run.metrics.get("memory", {}).values())
    if not recorded:
        return table
    for run in runs:
        memories = run.metrics.get("memory") or {"-": None}
        for conversation, stats in memories.items():
            structure = stats.get("structure") if isinstance(stats, dict) else None
            if not structure:
                table.rows.append([run.name, conversation, "no structure recorded", "unknown"])
                continue
            shape = "; ".join(f"{key}={_shape_value(value)}" for key, value in structure.items()
                              if key != "degenerate" and _shape_value(value) is not None)
            flags = structure.get("degenerate") or []
            table.rows.append([run.name, conversation, shape, "DEGENERATE: " + "; ".join(flags) if flags else "no"])
    return table


def _search_table(runs: list[RunResult]) -> Table:
    table = Table("Search statistics (over the answered questions)", ["run", "statistics"],
                  note="The pipeline's own summary of its searches (metrics.json search; CompassMem: appendix "
                       "Table 4, where the paper reports about 7-9 steps, 70-83% of questions refined, 2-4 events kept).")
    for run in runs:
        found = run.metrics.get("search") or {}
        shown = "; ".join(f"{key}={_shape_value(value)}" for key, value in found.items()
                          if _shape_value(value) is not None)
        if shown:
            actions = found.get("actions")
            table.rows.append([run.name, shown + (f"; actions={actions}" if isinstance(actions, dict) else "")])
    return table


def _shape_value(value: Any) -> str | None:
    """A structure value as the shape column shows it: a number, or a list of numbers; None
    for anything else (mappings such as unit kinds stay in metrics.json)."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return _fmt(value)
    if isinstance(value, list) and all(isinstance(v, (int, float, type(None))) for v in value):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return None


def _paired_tables(a: RunResult, b: RunResult) -> list[Table]:
    paired = Table(f"{b.name} against {a.name}, question by question",
                   ["metric", "n", a.name, b.name, "difference", "95% CI (bootstrap)", "distinguishable from 0",
                    "better / worse / same", "sign test p"],
                   note="Percentile bootstrap over questions (10,000 resamples, seed 0): a difference is "
                        "distinguishable from 0 when its interval leaves 0 out; two-sided sign test over the "
                        "questions whose score differs.")
    different_judges = a.judge is not None and b.judge is not None and a.judge != b.judge
    compared = [m for m in PAIRED_METRICS if m != "judge" or not different_judges]
    if different_judges:
        paired.note += (f" The judge is not compared: different judges scored the runs ({a.name}: {a.judge}; "
                        f"{b.name}: {b.judge}).")
    for metric in compared:
        d = paired_difference(a, b, metric)
        if d is not None:
            paired.rows.append([metric, d.n, d.mean_a, d.mean_b, f"{d.difference:+.3f}",
                                f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]",
                                "yes" if d.ci_low > 0 or d.ci_high < 0 else "no",
                                f"{d.wins} / {d.losses} / {d.ties}", d.sign_test_p])
    detectable = Table(f"{b.name} against {a.name}: the smallest difference each category could detect",
                       ["metric", *(a.metrics.get("by_category") or dict.fromkeys(row["category"] for row in a.rows))],
                       note="n, then the smallest difference of means those questions would detect with 80% "
                            "power in a two-sided 5% test, from the spread of both runs' per-question scores "
                            "taken as independent (conservative: pairing can only lower it; '-': no spread).")
    for metric in compared:
        found = detectable_by_category(a, b, metric)
        if found:
            detectable.rows.append([metric, *(f"n={n}: {_fmt(mde)}" if (n, mde) != (None, None) else "-"
                                              for n, mde in (found.get(c, (None, None))
                                                             for c in detectable.headers[1:]))])
    metric = "f1_locomo" if a.overall("f1_locomo") is not None and b.overall("f1_locomo") is not None else "recall@10"
    changed = changed_questions(a, b, metric)
    questions = Table(f"Questions whose {metric} changed: {a.name} -> {b.name} ({len(changed)})",
                      ["question", "category", "text", "gold", f"answer: {a.name}", f"answer: {b.name}",
                       f"{metric}"])
    for c in changed:
        questions.rows.append([c["question_id"], c["category"], c["question"], c["gold"], c["answer_a"],
                               c["answer_b"], f"{_fmt(c['score_a'])} -> {_fmt(c['score_b'])}"])
    return [paired, *(table for table in (detectable,) if table.rows), questions]


def with_interval(block: dict[str, Any], metric: str) -> str:
    """``0.335 [0.29, 0.38]``: the mean with its 95% interval where metrics.json has one."""
    interval = (block.get("ci") or {}).get(metric)
    shown = _fmt(block.get(metric))
    return f"{shown} [{interval['low']:.2f}, {interval['high']:.2f}]" if interval else shown


def _count(value):
    return None if value is None else f"{value:,.0f}"


def _seconds(value):
    return None if value is None else f"{value:,.1f}"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _runs_list(runs: list[RunResult]) -> list[str]:
    return [f"{run.name}: {run.folder} (config {run.metrics.get('config', '?')}, data {run.metrics.get('data', '?')}, "
            f"conversations {', '.join(run.metrics.get('conversations') or [])}"
            + (f", sessions {run.metrics['sessions']}" if run.metrics.get("sessions") else "")
            + (f", judge {run.judge}" if run.judge else "") + ")" for run in runs]


def _html(title: str, runs: list[RunResult], tables: list[Table], drawn: dict[str, str]) -> str:
    e = html.escape
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{e(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;"
        "margin:0.5em 0 1.5em;font-size:13px}th,td{border:1px solid #ccc;padding:3px 6px;text-align:right;"
        "vertical-align:top}td:first-child,th:first-child{text-align:left}td.text{text-align:left;max-width:28em}"
        "figure{display:inline-block;margin:0 1em 1em 0}figcaption{font-size:13px;color:#555}"
        ".note{font-size:13px;color:#555}</style></head><body>",
        f"<h1>{e(title)}</h1>", "<ul>", *[f"<li>{e(line)}</li>" for line in _runs_list(runs)], "</ul>",
    ]
    for table in tables:
        parts.append(f"<h2>{e(table.title)}</h2>")
        if table.note:
            parts.append(f'<p class="note">{e(table.note)}</p>')
        parts.append("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in table.headers) + "</tr></thead><tbody>")
        for row in table.rows:
            cells = []
            for value in row:
                text = _fmt(value)
                cls = ' class="text"' if isinstance(value, str) and len(text) > 24 else ""
                cells.append(f"<td{cls}>{e(text)}</td>")
            parts.append("<tr>" + "".join(cells) + "</tr>")
        parts.append("</tbody></table>")
        if table.title == "Metrics" and drawn:
            parts.append("<h2>Figures</h2>")
            parts.extend(f'<figure><img src="{e(name)}" alt="{e(caption)}"><figcaption>{e(caption)}</figcaption>'
                         "</figure>" for name, caption in drawn.items())
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _markdown(title: str, runs: list[RunResult], tables: list[Table], drawn: dict[str, str]) -> str:
    lines = [f"# {title}", "", *[f"- {line}" for line in _runs_list(runs)], ""]
    for table in tables:
        lines += [f"## {table.title}", ""]
        if table.note:
            lines += [table.note, ""]
        lines.append("| " + " | ".join(table.headers) + " |")
        lines.append("|" + "---|" * len(table.headers))
        for row in table.rows:
            lines.append("| " + " | ".join(_fmt(v).replace("|", "\\|").replace("\n", " ") for v in row) + " |")
        lines.append("")
        if table.title == "Metrics" and drawn:
            lines += [f"![{caption}]({name})" for name, caption in drawn.items()] + [""]
    return "\n".join(lines)
