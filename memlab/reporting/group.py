"""A headline group: finished runs over one question set as one markdown table, every figure with
its n and 95% interval, each row's paired difference against the best row, its cost and what its
memory formed (``memlab sweep`` writes it as ``group.md``).

Columns, per row: LoCoMo F1; A-Mem F1 question-weighted and as the unweighted mean of the four
LoCoMo categories (the papers' small-model rows, SimpleMem's 25.23 for Qwen2.5-1.5B and A-Mem's
20.67, are such means); the judge, against the original gold and the audited one; R@10 with the
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

from memlab.eval.intervals import stratified_mean_interval
from memlab.reporting.page import with_interval
from memlab.reporting.paired import paired_difference
from memlab.reporting.runs import RunResult
from memlab.types import ANSWERABLE_CATEGORIES

#: Above this share of the conversation's turns in the top 10 units, R@10 is flagged.
WIDE_TOP10 = 0.25
HEADERS = ("row", "n", "F1 (LoCoMo)", "F1 (A-Mem)", "F1 (A-Mem), category mean", "judge", "judge, audited gold",
           "R@10 (top 10 covers)", "F1 (A-Mem) by category", "abstains on adversarial", "build LLM calls",
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
        recall_cell(run, turns), _by_category(run),
        _with_ci(adversarial, "abstained") + f" (n={adversarial['n']})" if adversarial else "-",
        _count(usage.get("build", {}).get("llm_calls")), _count(timing.get("build_seconds")),
        _number(timing.get("query_seconds_p50"), 1), _count(usage.get("tokens_per_query")), structure_summary(run),
        _paired(reference, run, primary),
    ]


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
    there, its replayed calls count at the seconds the machine that made them recorded."""
    seen: dict[str, list[str]] = {}
    for run in runs:
        cpu = (run.metrics.get("machine") or {}).get("cpu") or {}
        where = f"{cpu.get('model') or 'unrecorded'} ({', '.join(cpu.get('features') or []) or 'features unrecorded'}; " \
                f"{(run.metrics.get('machine') or {}).get('cores', '?')} cores)"
        seen.setdefault(where, []).append(run.name)
    return "Seconds are model time from a cold response cache, measured on: " + "; ".join(
        f"{where} for {', '.join(names)}" for where, names in seen.items()) + "."
