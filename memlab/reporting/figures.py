"""The report's plots (matplotlib, written as PNG files the page embeds). Each function draws
one figure from runs over the same questions and returns False, writing nothing, when no run
has the figures it plots (e.g. F1 of retrieval-only runs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server or in CI
import matplotlib.pyplot as plt  # noqa: E402

from memlab.reporting.runs import RunResult  # noqa: E402

RECALL_KS = (1, 5, 10, 20)
LABELS = {"f1_locomo": "F1 (LoCoMo)", "f1_amem": "F1 (A-Mem)", "judge": "judge", "recall@10": "recall@10"}


def category_bars(runs: Sequence[RunResult], metric: str, path: Path) -> bool:
    """``metric`` per category and overall, one bar per run."""
    categories = list(dict.fromkeys(c for run in runs for c in run.metrics["by_category"]))
    groups = categories + ["overall"]
    values = [[_block(run, group).get(metric) for group in groups] for run in runs]
    if all(v is None for row in values for v in row):
        return False
    width = 0.8 / len(runs)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(groups) * max(1, len(runs)) ** 0.5), 3.8))
    for i, (run, row) in enumerate(zip(runs, values)):
        xs = [g + (i - (len(runs) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [v or 0.0 for v in row], width, label=run.name)
    ax.set_xticks(range(len(groups)), [f"{g}\n(n={_block(runs[0], g).get('n', 0)})" for g in groups])
    ax.set_ylabel(LABELS.get(metric, metric))
    ax.set_ylim(0, 1)
    ax.set_title(f"{LABELS.get(metric, metric)} by category")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _save(fig, path)
    return True


def cost_quality(runs: Sequence[RunResult], path: Path) -> bool:
    """Quality (F1 and, where judged, the judge) against cost per query (tokens; seconds, p50), one point per run."""
    qualities = [m for m in ("f1_locomo", "judge") if any(run.overall(m) is not None for run in runs)]
    if not qualities:
        return False
    costs = (("tokens per query", lambda r: r.metrics["usage"].get("tokens_per_query")),
             ("seconds per query (p50, cold cache)", lambda r: r.metrics["timing"].get("query_seconds_p50")))
    fig, axes = plt.subplots(len(qualities), 2, figsize=(10, 3.6 * len(qualities)), squeeze=False)
    for row, quality in enumerate(qualities):
        for col, (cost_name, cost) in enumerate(costs):
            ax = axes[row][col]
            for i, run in enumerate(runs):
                x, y = cost(run), run.overall(quality)
                if x is not None and y is not None:  # one colour and marker per run in every panel
                    ax.scatter([x], [y], s=48, color=f"C{i % 10}", marker="os^Dv<>ph*"[i % 10], label=run.name)
            ax.set_xlabel(cost_name)
            ax.set_ylabel(LABELS[quality])
            ax.set_xlim(left=0)
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize="small")
    fig.suptitle("quality against cost per query")
    _save(fig, path)
    return True


def recall_curves(runs: Sequence[RunResult], path: Path) -> bool:
    """Evidence recall@k for k in 1, 5, 10, 20, one line per run."""
    drawn = False
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for run in runs:
        points = [(k, run.overall(f"recall@{k}")) for k in RECALL_KS]
        points = [(k, v) for k, v in points if v is not None]
        if points:
            ax.plot(*zip(*points), marker="o", label=run.name)
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("k (retrieved units)")
    ax.set_ylabel("evidence recall@k")
    ax.set_xticks(RECALL_KS)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, path)
    return True


def _block(run: RunResult, group: str) -> dict:
    return run.metrics["overall"] if group == "overall" else run.metrics["by_category"].get(group, {})


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
