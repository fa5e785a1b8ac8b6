"""The headline tables at the top of BENCHMARKS.md, generated from committed runs (never by hand):
``memlab headline [--manifest eval/headline.yaml] [--benchmarks BENCHMARKS.md] [--check]``.

The manifest (``eval/headline.yaml``) lists the rows: a system, which configuration of it
(``published``: the paper's pipeline as memlab runs it; ``best``: the best measured; an
ablation's name), the committed run folder (``eval/runs/...``), optionally ``questions`` (the
question set, for a run made before ``metrics.json`` recorded ``max_questions``), optionally
``flag`` (what the current structure rules say of a memory built before runs recorded a structure
block, read from the stats its ``metrics.json`` kept) and the command that made it (its model
replies are in the committed response cache, ``eval/caches/``); or a sweep (``sweep``: its file,
``runs``: its committed row folders), rendered first as one group
(``memlab.eval.sweep.group_markdown``). Paths in the manifest are relative to the folder above
its own (the repository, for ``eval/headline.yaml``). Rows are grouped by the questions they answer, so only rows of one group
compare; each group says its conversations, session prefix, categories and n. Every figure is
recomputed from the run's ``predictions.jsonl`` with its 95% interval
(``memlab.eval.metrics.aggregate``: bootstrap over questions, Wilson for a 0/1 judge), so runs
made before intervals existed get them too. A judge-scored figure carries its judge's check
(``eval/judge_checks/*.json``, written by ``memlab check-judge``): how often that judge accepts
the gold answers and the audit's vague and specific wrong answers, and whether it is lenient.

The table replaces what lies between ``<!-- headline:start -->`` and ``<!-- headline:end -->``
in BENCHMARKS.md, the judge checks what lies between ``<!-- judges:start -->`` and ``<!--
judges:end -->``, and the list of its ``## `` sections what lies between ``<!-- contents:start
-->`` and ``<!-- contents:end -->`` (``regenerate``); ``--check`` writes nothing and exits 1 when
any differs from what is generated (a test runs it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from memlab.errors import MemlabError
from memlab.eval.metrics import aggregate
from memlab.eval.report import METRICS
from memlab.eval.runner import select_conversations
from memlab.fileio import atomic_file
from memlab.reporting.group import recall_cell, structure_summary, temporal_date_cell
from memlab.reporting.page import with_interval
from memlab.reporting.runs import load_run
from memlab.types import ANSWERABLE_CATEGORIES

START, END = "<!-- headline:start -->", "<!-- headline:end -->"
CONTENTS_START, CONTENTS_END = "<!-- contents:start -->", "<!-- contents:end -->"
JUDGES_START, JUDGES_END = "<!-- judges:start -->", "<!-- judges:end -->"


class HeadlineError(MemlabError, ValueError):
    """A manifest, run, judge check or benchmarks file the headline cannot be made from; the message names it."""


def load_manifest(path: Path) -> list[dict[str, str]]:
    try:
        rows = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise HeadlineError(f"{path}: cannot read the manifest: {e}") from None
    wanted = ("system", "configuration", "run", "command")
    if not isinstance(rows, list) or not all(
            isinstance(r, dict) and (all(isinstance(r.get(k), str) for k in wanted)
                                     or (isinstance(r.get("sweep"), str) and isinstance(r.get("runs"), str)))
            for r in rows):
        raise HeadlineError(f"{path}: a list of rows, each with the strings {list(wanted)} (or a sweep group: "
                          "the strings sweep and runs)")
    return rows


def sweep_group(entry: dict[str, str], root: Path) -> list[str]:
    """A sweep's group (``memlab sweep``): its questions, the table of its complete rows, the sentence
    under it and the rows not complete yet, from the sweep file and its committed row folders."""
    from memlab.eval.sweep import SweepError, group_markdown, load_sweep, sweep_status

    try:
        sweep = load_sweep(root / entry["sweep"])
        statuses = sweep_status(sweep, root / entry["runs"])
        text = group_markdown(sweep, statuses, root / entry["runs"])
    except (SweepError, ValueError) as e:
        raise HeadlineError(f"{entry['sweep']}: {e}") from None
    q = sweep.questions
    done = sum(s.state == "complete" for s in statuses)
    judges = {judge_name(s.metrics["judge_info"]) for s in statuses if s.state == "complete" and s.metrics
              and s.metrics.get("judge_info")}
    checks = judge_checks(root / "eval" / "judge_checks")
    named = "".join(f" ({judge}; its check: {checks.get(judge, 'not checked')})" for judge in sorted(judges))
    title = (f"**{', '.join(q.conversations or ['all conversations'])}, all sessions, "
             f"{'categories 1-4 and adversarial' if 'adversarial' in (q.categories or ()) else 'categories 1-4'}, "
             f"one judge, every row on the same questions**{named} ({done} of {len(statuses)} rows complete; "
             f"`memlab sweep {entry['sweep']} --out {entry['runs']}`)")
    return [title, "", text or "No row is complete yet.", ""]


def run_figures(folder: Path) -> dict[str, Any]:
    """The question set and the overall figures of the run in ``folder``, recomputed from its rows."""
    try:
        metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    except (OSError, ValueError) as e:
        raise HeadlineError(f"{folder}: not a finished run ({e})") from None
    overall = aggregate(rows, METRICS)["overall"]
    categories = sorted({row["category"] for row in rows}, key=lambda c: (c not in ANSWERABLE_CATEGORIES, c))
    judge = judge_name(metrics["judge_info"]) if metrics.get("judge_info") else None
    return {"questions": question_set(metrics, categories), "n": overall["n"], "overall": overall, "judge": judge,
            "tokens_per_query": metrics["usage"].get("tokens_per_query"),
            "build_calls": metrics["usage"]["build"].get("llm_calls")}


def question_set(metrics: dict[str, Any], categories: list[str]) -> str:
    """``conv-26, sessions 1-4, categories 1-4``: what a group of rows answers."""
    parts = [", ".join(metrics.get("conversations") or [])]
    parts.append(f"sessions 1-{metrics['sessions']}" if metrics.get("sessions") else "all sessions")
    if metrics.get("max_questions"):
        parts.append(f"first {metrics['max_questions']} questions each")
    answerable = [c for c in categories if c in ANSWERABLE_CATEGORIES]
    parts.append("categories 1-4" if len(answerable) == len(categories) else "categories " + ", ".join(categories))
    return ", ".join(parts)


def judge_name(info: dict[str, Any]) -> str:
    """A judge's name in a table: its prompt, or how it combines the judges it is made of
    (``memlab.eval.judge``: the rules first, two that must agree, two of which one must accept)."""
    if "rules_first" in info:
        return "rules, then " + judge_name(info["then"])
    if "agreement_of" in info:
        return "agreement of " + " and ".join(judge_name(part) for part in info["agreement_of"])
    if "any_of" in info:
        return "(" + " or ".join(judge_name(part) for part in info["any_of"]) + ")"
    model = str(info.get("judge_model", "")).split("@")[0]  # the name, without the settings digest
    return f"`{info.get('prompt_id')}` ({model})"


def load_judge_checks(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The committed checks of ``memlab check-judge`` in ``folder`` (none when it is absent),
    each with the keys the tables read (a file without them is one ``HeadlineError``)."""
    checks = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            check = json.loads(path.read_text(encoding="utf-8"))
            if not (isinstance(check["judge"], dict) and isinstance(check["by_category"], dict) and "questions" in check
                    and all("rate" in check["sets"][name] for name in ("gold", "specific_wrong", "vague_wrong"))):
                raise ValueError("no judge, by_category, questions or rates")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise HeadlineError(f"{path}: not a judge check of memlab check-judge ({e})") from None
        checks.append((path, check))
    return checks


def judge_table(folder: Path) -> str:
    """The committed judge checks (``eval/judge_checks/*.json``) as tables: each judge's acceptance
    of the gold and of the two wrong-answer sets, its vague-wrong acceptance per category, and, for
    the checks that have one, its positive control (``memlab.eval.labels``)."""
    checks = load_judge_checks(folder)
    lines = [JUDGES_START, ""]
    if not checks:
        return "\n".join(lines + ["(no judge check committed yet)", "", JUDGES_END])

    def rate(block: dict[str, Any]) -> str:
        if block["rate"] is None:
            return "-"
        ci = block["ci"]
        return f"{block['rate']:.3f} [{ci['low']:.2f}, {ci['high']:.2f}] ({block['accepted']}/{block['judged']})"

    lines += ["| judge | questions | accepts gold | accepts specific wrong | accepts vague wrong | no verdict "
              "| gpt-4o-mini, generous prompt: specific / vague | lenient (vague > 1/3) | file |",
              "|---|---|---|---|---|---|---|---|---|"]
    for path, check in checks:
        sets = check["sets"]
        reference = " / ".join(f"{sets[name]['reference_rate']:.3f}" if sets[name].get("reference_rate") is not None
                               else "-" for name in ("specific_wrong", "vague_wrong"))
        silent = sum(sets[name]["no_verdict"] for name in sets)
        lines.append(f"| {judge_name(check['judge'])} | {check['questions']} | {rate(sets['gold'])} | "
                     f"{rate(sets['specific_wrong'])} | {rate(sets['vague_wrong'])} | {silent} | {reference} | "
                     f"{'**yes**' if check.get('lenient') else 'no'} | `{path.relative_to(folder.parents[1])}` |")
    categories = list(dict.fromkeys(c for _, check in checks for c in check["by_category"]))
    lines += ["", "Per category: acceptance of gold / of vague wrong answers (n).", "",
              "| judge | " + " | ".join(categories) + " |", "|---|" + "---|" * len(categories)]
    for _, check in checks:
        cells = []
        for category in categories:
            block = check["by_category"].get(category)
            cells.append("-" if block is None else
                         f"{block['gold']['rate']:.2f} / {block['vague_wrong']['rate']:.2f} ({block['gold']['judged']})")
        lines.append(f"| {judge_name(check['judge'])} | " + " | ".join(cells) + " |")
    controlled = [(path, check) for path, check in checks if check.get("positive_control")]
    if controlled:
        lines += ["", "Positive control: real predictions of categories 1-4, labelled right, partly right or wrong "
                      "by reading (the file's rule); what each judge accepts of each, and Cohen's kappa of its "
                      "verdicts with right vs wrong (partly right left out). All items, then the half kept for "
                      "reporting a judge chosen on the other.", "",
                  "| judge | labelled items (no verdict) | accepts right (recall) | accepts partly right "
                  "| accepts wrong | kappa | report half: accepts right / wrong, kappa |",
                  "|---|---|---|---|---|---|---|"]
        for _, check in controlled:
            control = check["positive_control"]
            every, report = control["all"], control["report"]
            lines.append(f"| {judge_name(check['judge'])} | {every['n']} ({every['no_verdict']}) | "
                         f"{_share(every['accepts_right'])} | {_share(every['accepts_partial'])} | "
                         f"{_share(every['accepts_wrong'])} | {_kappa(every['kappa'])} | "
                         f"{_share(report['accepts_right'])} / {_share(report['accepts_wrong'])}, "
                         f"{_kappa(report['kappa'])} |")
    return "\n".join(lines + ["", JUDGES_END])


def _share(block: dict[str, Any]) -> str:
    if block["rate"] is None:
        return "-"
    low, high = block["ci"]
    return f"{block['rate']:.2f} [{low:.2f}, {high:.2f}] ({block['accepted']}/{block['n']})"


def _kappa(block: dict[str, Any]) -> str:
    if block["value"] is None:
        return "-"
    interval = f" [{block['ci'][0]:.2f}, {block['ci'][1]:.2f}]" if block.get("ci") else ""
    return f"{block['value']:.2f}{interval} (n={block['n']})"


def judge_checks(folder: Path) -> dict[str, str]:
    """``{judge name: "gold 0.97 / vague 0.62 / specific 0.18 (n=1035), lenient; right answers 0.79,
    kappa 0.82 (report half)"}``: each judge's acceptance rates from the committed checks of
    ``memlab check-judge`` in ``folder``, and its agreement with the labels where it was measured."""
    checks: dict[str, str] = {}
    for _, check in load_judge_checks(folder):
        sets = check["sets"]
        rates = " / ".join(f"{label} {sets[name]['rate']:.2f}" for label, name in
                           (("gold", "gold"), ("vague", "vague_wrong"), ("specific", "specific_wrong")))
        summary = f"{rates} (n={check['questions']})" + (", **lenient**" if check.get("lenient") else "")
        report = (check.get("positive_control") or {}).get("report")
        if report and report["accepts_right"]["rate"] is not None and report["kappa"]["value"] is not None:
            summary += (f"; labelled right answers accepted {report['accepts_right']['rate']:.2f}, kappa "
                        f"{report['kappa']['value']:.2f} (report half, n={report['n']})")
        checks[judge_name(check["judge"])] = summary
    return checks


def conversation_turns(root: Path, metrics: dict[str, Any]) -> dict[str, int]:
    """Each conversation's turn count in the data the run read (its ``data`` path, relative to
    ``root``, within its session prefix); empty when that data is not here."""
    path = root / str(metrics.get("data", ""))
    if not metrics.get("data") or metrics["data"] == "embedded sample" or not path.exists():
        return {}
    conversations, _ = select_conversations(path, metrics.get("conversations"), metrics.get("sessions"), None, None)
    return {c.id: sum(1 for _ in c.turns()) for c in conversations}


def render(rows: list[dict[str, str]], root: Path) -> str:
    checks = judge_checks(root / "eval" / "judge_checks")
    groups: dict[tuple[str, int], list[tuple[dict[str, str], dict[str, Any]]]] = {}
    lines = [START, ""]
    for entry in (row for row in rows if "sweep" in row):
        lines += sweep_group(entry, root)
    rows = [row for row in rows if "sweep" not in row]
    for row in rows:
        figures = run_figures(root / row["run"])
        figures["questions"] = row.get("questions", figures["questions"])
        groups.setdefault((figures["questions"], figures["n"]), []).append((row, figures))
    for (questions, n), members in groups.items():
        lines += [f"**{questions}** ({n} questions)", "",
                  "| system | configuration | F1 (LoCoMo) | F1 (A-Mem) | judge (prompt; its check: acceptance of gold / "
                  "vague wrong / specific wrong answers) | temporal, date-aware | R@10 (top 10 covers) | tokens / query "
                  "| build LLM calls | structure (what did not form) | run |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for row, figures in members:
            judge = with_interval(figures["overall"], "judge")
            if figures["judge"]:
                judge = f"{judge} ({figures['judge']}; {checks.get(figures['judge'], 'not checked')})"
            tokens, calls = figures["tokens_per_query"], figures["build_calls"]
            run = load_run(root / row["run"])
            structure = structure_summary(run) + (f"; **{row['flag']}**" if row.get("flag") else "")
            lines.append(f"| {row['system']} | {row['configuration']} | {with_interval(figures['overall'], 'f1_locomo')} | "
                         f"{with_interval(figures['overall'], 'f1_amem')} | {judge} | {temporal_date_cell(run.metrics)} | "
                         f"{recall_cell(run, conversation_turns(root, run.metrics), figures['overall'])} | "
                         f"{'-' if tokens is None else f'{tokens:,.0f}'} | {'-' if calls is None else f'{calls:,.0f}'} | "
                         f"{structure} | `{row['run']}` |")
        lines.append("")
    lines += ["The commands that made them (their model replies are in the shards of `eval/caches/`; "
              "`memlab cache import eval/caches` first):",
              "", "```bash", *(row["command"] for row in rows), "```", "", END]
    return "\n".join(lines)


def replace_block(text: str, start: str, end: str, block: str, where: Path) -> str:
    """``text`` with what lies from ``start`` to ``end`` replaced by ``block`` (which holds both)."""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise HeadlineError(f"{where}: needs exactly one {start} ... {end} block")
    return text[:text.index(start)] + block + text[text.index(end) + len(end):]


def contents(text: str) -> str:
    """A linked list of the ``## `` sections of ``text`` (code blocks skipped), GitHub's anchors,
    nested under the ``# `` part they are in (every ``# `` heading after the title is a part)."""
    lines, fenced, in_part = [CONTENTS_START, ""], False, False
    for number, line in enumerate(text.splitlines()):
        fenced ^= line.startswith("```")
        level = len(line) - len(line.lstrip("#"))
        if fenced or level not in (1, 2) or line[level:level + 1] != " " or (level == 1 and number == 0):
            continue
        title = line[level + 1:].strip()
        anchor = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        in_part = in_part or level == 1
        lines.append(("  " if level == 2 and in_part else "") + f"- [{title}](#{anchor})")
    return "\n".join(lines + ["", CONTENTS_END])


def update(text: str, table: str, where: Path, judges: str | None = None) -> str:
    """``text`` with its headline table, its judge-check tables (``judges``, when given) and its
    contents list regenerated."""
    text = replace_block(text, START, END, table, where)
    if judges is not None and JUDGES_START in text:  # the judge-check block is optional
        text = replace_block(text, JUDGES_START, JUDGES_END, judges, where)
    return replace_block(text, CONTENTS_START, CONTENTS_END, contents(text), where)


def regenerate(manifest: Path, benchmarks: Path) -> tuple[str, str]:
    """``(text, updated)``: the benchmarks file as it is, and with its headline, judge-check and
    contents blocks generated from ``manifest`` (its paths relative to the folder above its own)."""
    root = manifest.resolve().parents[1]
    table = render(load_manifest(manifest), root)
    try:
        text = benchmarks.read_text(encoding="utf-8")
    except OSError as e:
        raise HeadlineError(f"{benchmarks}: cannot read it ({e.strerror or e})") from None
    return text, update(text, table, benchmarks, judge_table(root / "eval" / "judge_checks"))


def write_headline(benchmarks: Path, updated: str) -> None:
    with atomic_file(benchmarks) as tmp:
        tmp.write_text(updated, encoding="utf-8")
