"""A headline group: finished runs over one question set as one markdown table, every figure with
its n and 95% interval, each row's paired difference against the best row, its cost and what its
memory formed (``memlab sweep`` writes it as ``group.md``).

Columns, per row: LoCoMo F1; A-Mem F1 question-weighted and as the unweighted mean of the four
LoCoMo categories (the papers' small-model rows, SimpleMem's 25.23 for Qwen2.5-1.5B and A-Mem's
20.67, are such means); the judge, against the original gold and the audited one; the temporal
questions' date-aware accuracy (``memlab.eval.temporal_match``, with its n); R@10 with the
share of the conversation its top 10 units cover (over a quarter, the figure says little: a
memory of 13 events is nearly all read at k = 10) and a flag where the memory's provenance is
wider than the text the answerer reads (CompassMem's attached turns); A-Mem F1 per category;
category-5 abstention; build LLM calls and seconds, query seconds p50 and tokens per query; the
structure block's degenerate flags, or ``no structure recorded``; and the paired difference of
the primary metric against the best row with its bootstrap interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from memlab.eval.intervals import bootstrap_interval, stratified_mean_interval
from memlab.reporting.page import with_interval
from memlab.reporting.paired import paired_difference
from memlab.reporting.runs import RunResult
from memlab.types import ANSWERABLE_CATEGORIES

#: Above this share of the conversation's turns in the top 10 units, R@10 is flagged.
WIDE_TOP10 = 0.25
HEADERS = ("row", "n", "F1 (LoCoMo)", "F1 (A-Mem)", "F1 (A-Mem), category mean", "judge", "judge, audited gold",
           "temporal, date-aware", "R@10 (top 10 covers)", "F1 (A-Mem) by category", "abstains on adversarial",
           "build LLM calls",
           "build s", "query s p50", "tokens / query", "structure", "{primary} − best row")


def group_table(runs: Sequence[RunResult], labels: Mapping[str, str], best: str | None, primary: str,
                turns: Mapping[str, int]) -> str:
    """The markdown table of ``runs`` (already checked to answer the same questions), each named
    by ``labels[run.name]``; ``best`` names the row the others are paired against on ``primary``;
    ``turns`` is each conversation's turn count (for the R@10 coverage)."""
    reference = next((run for run in runs if run.name == best), None)
    headers = [h.format(primary=primary) for h in HEADERS]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for run in runs:
        lines.append("| " + " | ".join(_cells(run, labels.get(run.name, run.name), reference, primary, turns)) + " |")
    return "\n".join(lines)


def _cells(run: RunResult, label: str, reference: RunResult | None, primary: str,
           turns: Mapping[str, int]) -> list[str]:
    overall, metrics = run.metrics["overall"], run.metrics
    audited = (metrics.get("audited") or {}).get("overall") or {}
    adversarial = metrics.get("by_category", {}).get("adversarial")
    usage, timing = metrics.get("usage", {}), metrics.get("timing", {})
    return [
        label, str(overall.get("n", "-")), _with_ci(overall, "f1_locomo"), _with_ci(overall, "f1_amem"),
        _category_mean(run), _with_ci(overall, "judge"), _with_ci(audited, "judge") if audited else "-",
        temporal_date_cell(metrics), recall_cell(run, turns), _by_category(run),
        _with_ci(adversarial, "abstained") + f" (n={adversarial['n']})" if adversarial else "-",
        _count(usage.get("build", {}).get("llm_calls")), _count(timing.get("build_seconds")),
        _number(timing.get("query_seconds_p50"), 1), _count(usage.get("tokens_per_query")), structure_summary(run),
        _paired(reference, run, primary),
    ]


def temporal_date_cell(metrics: Mapping[str, Any]) -> str:
    """The date-aware accuracy of the temporal questions whose gold it resolves, with their n;
    "not recorded" for a run made before it was measured."""
    temporal = metrics.get("by_category", {}).get("temporal") or {}
    interval = (temporal.get("ci") or {}).get("temporal_date")
    if "temporal_date" not in temporal:
        return "not recorded"
    return "-" if interval is None else f"{with_interval(temporal, 'temporal_date')} (n={interval['n']})"


def _with_ci(block: Mapping[str, Any] | None, metric: str) -> str:
    return with_interval(block, metric) if block else "-"


def _answerable(run: RunResult) -> list[dict[str, Any]]:
    return [row for row in run.rows if row.get("category") in ANSWERABLE_CATEGORIES and row.get("error") is None]


def _category_mean(run: RunResult) -> str:
    """The unweighted mean over LoCoMo categories 1-4 of A-Mem F1, with a bootstrap interval that
    resamples questions within each category."""
    groups = [[row["f1_amem"] for row in _answerable(run) if row["category"] == category and row.get("f1_amem")
               is not None] for category in ANSWERABLE_CATEGORIES]
    groups = [g for g in groups if g]
    if not groups:
        return "-"
    mean = float(np.mean([np.mean(g) for g in groups]))
    low, high = stratified_mean_interval(groups)
    return f"{mean:.3f} [{low:.2f}, {high:.2f}] ({len(groups)} categories)"


def _by_category(run: RunResult) -> str:
    """``multi-hop 0.21 / temporal 0.35 / ...``: A-Mem F1 per answerable category, with its n."""
    blocks = run.metrics.get("by_category", {})
    parts = [f"{category} {blocks[category]['f1_amem']:.2f} (n={blocks[category]['n']})"
             for category in ANSWERABLE_CATEGORIES if blocks.get(category, {}).get("f1_amem") is not None]
    return "; ".join(parts) or "-"


def top10_coverage(run: RunResult, turns: Mapping[str, int]) -> float | None:
    """The mean share of its conversation's turns that a question's top 10 units cover (their
    provenance); None when the run recorded no retrieval."""
    shares = []
    for row in _answerable(run):
        total = turns.get(row.get("conversation_id"))
        retrieved = row.get("retrieved")
        if not total or not retrieved:
            continue
        covered = {turn for unit in retrieved[:10] for turn in (unit if isinstance(unit, list) else [unit])}
        shares.append(len(covered) / total)
    return float(np.mean(shares)) if shares else None


def recall_cell(run: RunResult, turns: Mapping[str, int], overall: Mapping[str, Any] | None = None) -> str:
    """R@10 with its interval (from ``overall``, default the run's metrics), the share of the
    turns the top 10 covers and its flags."""
    shown = _with_ci(overall if overall is not None else run.metrics["overall"], "recall@10")
    if shown == "-":
        return shown
    coverage = top10_coverage(run, turns)
    flags = []
    if coverage is not None:
        shown += f" ({coverage:.0%} of the turns)"
        if coverage > WIDE_TOP10:
            flags.append("too few units for R@10 to mean much")
    attached = _max_structure(run, "attached_turn_share")
    if attached:
        flags.append(f"provenance wider than the text read ({attached:.0%} of turns attached)")
    return shown + "".join(f" **{flag}**" for flag in flags)


def _max_structure(run: RunResult, key: str) -> float | None:
    values = [block.get("structure", {}).get(key) for block in run.metrics.get("memory", {}).values()
              if isinstance(block, dict)]
    values = [v for v in values if isinstance(v, (int, float))]
    return max(values) if values else None


def structure_summary(run: RunResult) -> str:
    """Each conversation's degenerate flags (``conv-26: no relation edge crosses sessions``),
    ``formed`` where none, and ``no structure recorded`` for a run without a structure block."""
    memories = {conv: block for conv, block in run.metrics.get("memory", {}).items()
                if isinstance(block, dict) and isinstance(block.get("structure"), dict)}
    if not memories:
        return "no structure recorded"
    flagged = [f"{conv}: **{'; '.join(block['structure']['degenerate'])}**" for conv, block in memories.items()
               if block["structure"].get("degenerate")]
    return "; ".join(flagged) if flagged else f"formed ({', '.join(memories)})"


def _paired(reference: RunResult | None, run: RunResult, metric: str) -> str:
    if reference is None:
        return "-"
    if reference is run:
        return "best row"
    difference = paired_difference(reference, run, metric)
    if difference is None:
        return "-"
    distinct = "" if difference.ci_low <= 0 <= difference.ci_high else " *"
    return f"{difference.difference:+.3f} [{difference.ci_low:+.2f}, {difference.ci_high:+.2f}]{distinct}"


def _count(value: Any) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _number(value: Any, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def distinguishable_sentence(runs: Sequence[RunResult], labels: Mapping[str, str], best: str | None,
                             primary: str) -> str:
    """The sentence under a group: the best row on ``primary``, and which rows its paired 95%
    interval separates from it (the ``*`` of the table's last column) and which it does not."""
    reference = next((run for run in runs if run.name == best), None)
    if reference is None:
        return "No row is complete yet."
    apart, level = [], []
    for run in runs:
        if run is reference:
            continue
        difference = paired_difference(reference, run, primary)
        if difference is None:
            continue
        shown = f"{labels.get(run.name, run.name)} ({difference.difference:+.3f})"
        (level if difference.ci_low <= 0 <= difference.ci_high else apart).append(shown)
    value = reference.overall(primary)
    sentence = (f"Best row by {primary}: {labels.get(reference.name, reference.name)}"
                f"{f' ({value:.3f})' if value is not None else ''}.")
    if apart:
        sentence += f" Distinguishable from it (paired 95% interval excludes 0): {', '.join(apart)}."
    if level:
        sentence += f" Not distinguishable from it at this n: {', '.join(level)}."
    return sentence


def machines_sentence(runs: Sequence[RunResult]) -> str:
    """Where each row's seconds were measured (``metrics.json["machine"]``): a row's own calls ran
    there, its replayed calls count at the seconds the machine that made them recorded, so a row
    whose earlier attempts ran elsewhere (``machine.earlier_attempts``, kept by ``memlab sweep``)
    is named under each of its machines, "in part"."""
    seen: dict[str, list[str]] = {}
    for run in runs:
        machine = run.metrics.get("machine") or {}
        places = list(dict.fromkeys(_machine_phrase(m) for m in [machine, *machine.get("earlier_attempts", [])]))
        for where in places:
            seen.setdefault(where, []).append(run.name + (" (in part)" if len(places) > 1 else ""))
    return "Seconds are model time from a cold response cache, measured on: " + "; ".join(
        f"{where} for {', '.join(names)}" for where, names in seen.items()) + "."


def _machine_phrase(machine: Mapping[str, Any]) -> str:
    cpu = machine.get("cpu") or {}
    return f"{cpu.get('model') or 'unrecorded'} ({', '.join(cpu.get('features') or []) or 'features unrecorded'}; " \
           f"{machine.get('cores', '?')} cores)"


UNFINISHED_HEADERS = ("row", "reached", "builds finished (LLM calls, s)", "query s p50", "LLM calls / question",
                      "tokens / question", "left, at this pace", "{primary} on its answered questions",
                      "− best row, same questions", "its stand-in row")


def unfinished_table(records: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str],
                     reference: RunResult | None, primary: str) -> str:
    """The rows that have not finished (``memlab.eval.progress`` records by row name) as one
    markdown table: what each reached, what its builds and questions cost so far, how long the
    rest would take at that pace, its ``primary`` on the questions it answered beside the best
    row's on the same questions, and the cheaper row standing in for it (``stand_in``: its label
    and state). These figures are a prefix, not the group's question set."""
    headers = [h.format(primary=primary) for h in UNFINISHED_HEADERS]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for name, record in records.items():
        label = labels.get(name, name) + (" **(recorded with another config than the row's: stale)**"
                                           if record.get("stale") else "")
        lines.append("| " + " | ".join([label, *_progress_cells(record, reference, primary)]) + " |")
    return "\n".join(lines)


def _progress_cells(record: Mapping[str, Any], reference: RunResult | None, primary: str) -> list[str]:
    rows, builds, questions = record.get("rows") or [], record.get("builds") or [], record.get("questions") or {}
    total = sum(questions.values())
    built = [b["conversation_id"] for b in builds]
    building = record.get("building")
    reached = (f"{', '.join(built)} built; " if built else "no build finished; ") + \
        (f"{building['conversation_id']} part built; " if building else "") + \
        f"{len(rows)} of {total} questions answered (attempt of {record.get('attempt_started', '?')}, " \
        f"recorded {record.get('recorded', '?')})"
    build_cell = "; ".join([f"{b['conversation_id']}: {b['llm_calls']:,.0f} calls, {b['seconds']:,.0f} s"
                            + (f" **{'; '.join(b['degenerate'])}**" if b.get("degenerate") else "") for b in builds]
                           + ([_building_cell(building)] if building else [])) or "-"
    latencies = [r["cold_latency_s"] for r in rows if isinstance(r.get("cold_latency_s"), (int, float))]
    calls = [r["llm_calls"] for r in rows if isinstance(r.get("llm_calls"), (int, float))]
    tokens = [r["tokens"] for r in rows if isinstance(r.get("tokens"), (int, float))]
    return [
        reached, build_cell,
        f"{np.median(latencies):,.1f} (n={len(latencies)})" if latencies else "-",
        _number(np.mean(calls) if calls else None, 1), _count(np.mean(tokens) if tokens else None),
        _time_left(questions, built, builds, building, rows, latencies),
        _prefix_score(rows, primary), _prefix_paired(record, reference, primary), record.get("stand_in") or "-",
    ]


def _building_cell(building: Mapping[str, Any]) -> str:
    """The build running when the record was made: its cost so far, how far it got, what failed."""
    reached = building.get("reached")
    failures = building.get("failures") or {}
    return (f"{building['conversation_id']} (unfinished): {building['llm_calls']:,.0f} calls, "
            f"{building['seconds']:,.0f} s so far"
            + (f", {reached['turns']} of {reached['of']} turns added" if reached else "")
            + (f", failed calls {', '.join(f'{stage} {n}' for stage, n in sorted(failures.items()))}"
               if failures else ""))


def _time_left(questions: Mapping[str, int], built: Sequence[str], builds: Sequence[Mapping[str, Any]],
               building: Mapping[str, Any] | None, rows: Sequence[Mapping[str, Any]],
               latencies: Sequence[float]) -> str:
    """The rest at the measured pace: the questions left times the mean question, and the builds
    left times the mean build less what the build running has done (never below nothing);
    ``unknown`` while either pace is unmeasured."""
    questions_left = sum(questions.values()) - len(rows)
    builds_left = len([c for c in questions if c not in built])
    if (questions_left and not latencies) or (builds_left and not builds):
        return "unknown (no " + ("build" if builds_left and not builds else "question") + " finished yet)"
    mean_build = float(np.mean([b["seconds"] for b in builds])) if builds else 0.0
    seconds = questions_left * (float(np.mean(latencies)) if latencies else 0.0) + builds_left * mean_build
    if building is not None and builds_left:
        seconds -= min(float(building["seconds"]), mean_build)
    return f"~{seconds / 3600:.1f} h ({_plural(questions_left, 'question')}, {_plural(builds_left, 'build')})"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _prefix_score(rows: Sequence[Mapping[str, Any]], primary: str) -> str:
    values = [r[primary] for r in rows if r.get("category") in ANSWERABLE_CATEGORIES
              and isinstance(r.get(primary), (int, float))]
    if not values:
        return "-"
    low, high = bootstrap_interval(values)
    return f"{np.mean(values):.3f} [{low:.2f}, {high:.2f}] (n={len(values)})"


def _prefix_paired(record: Mapping[str, Any], reference: RunResult | None, primary: str) -> str:
    if reference is None:
        return "-"
    prefix = RunResult(record.get("row", "unfinished"), reference.folder,
                       {"overall_over": reference.metrics.get("overall_over")}, tuple(record.get("rows") or ()))
    difference = paired_difference(reference, prefix, primary)
    if difference is None:
        return "-"
    return f"{difference.difference:+.3f} [{difference.ci_low:+.2f}, {difference.ci_high:+.2f}] (n={difference.n})"
