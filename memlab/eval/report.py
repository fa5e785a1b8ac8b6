"""Aggregate per-question rows into ``metrics.json`` and print them as a table."""

from __future__ import annotations

from typing import Any

import numpy as np

from memlab.eval import metrics as M
from memlab.types import ANSWERABLE_CATEGORIES, LOCOMO_CATEGORIES

#: ``abstained``: the answer says the conversation does not hold it (``memlab.eval.abstention``):
#: right on adversarial questions, a false abstention on the others. ``temporal_date``: a temporal
#: question's predicted date inside the days its gold phrase denotes (``memlab.eval.temporal_match``).
ANSWER_METRICS = ("f1_locomo", "f1_amem", "bleu1", "judge", "abstained", "temporal_date")
RETRIEVAL_METRICS = (
    "recall@1", "recall@5", "recall@10", "recall@20",
    "recall@tok500", "recall@tok1000", "recall@tok2000",
)
#: Evidence recall of the units the answerer read, for pipelines that say which (``Answer.shown``).
CONTEXT_METRICS = ("recall@context", "context_tokens")
METRICS = ANSWER_METRICS + RETRIEVAL_METRICS + CONTEXT_METRICS
USAGE_KEYS = ("llm_calls", "prompt_tokens", "completion_tokens", "llm_seconds")


def summarise(
    rows: list[dict[str, Any]],
    retrieval_only: bool,
    build_seconds: float,
    build_usage: dict[str, float],
    judge_info: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    build_wall_seconds: float | None = None,
    stage_usage: dict[str, dict[str, float]] | None = None,
) -> dict[str, Any]:
    """The metrics.json payload. ``overall`` averages over categories 1-4 (the papers' convention:
    adversarial questions are reported in ``by_category`` only). With an errata file
    (``extra["errata"]``), ``audited`` holds the same blocks scored against the audited gold
    (each corrected row's ``audited`` scores in place of its own) and ``questions_corrected``.

    Timing is what the method costs from a cold response cache, so that a run resumed
    through the cache reports the same figures: ``build_seconds`` and the query percentiles
    add the recorded model time of cached calls to this run's wall time (the ``*_wall_*``
    entries are this run's wall time alone)."""
    locomo = is_locomo(rows)
    blocks = M.aggregate(rows, METRICS, ANSWERABLE_CATEGORIES if locomo else None)
    query_usage: dict[str, float] = {k: 0 for k in USAGE_KEYS}
    for row in rows:
        for key in USAGE_KEYS:
            query_usage[key] += row["usage"].get(key, 0)
    latencies = [row.get("cold_latency_s", row["latency_s"]) for row in rows]
    wall_latencies = [row["latency_s"] for row in rows]
    n = len(rows)
    metrics: dict[str, Any] = {
        **(extra or {}),
        "n_questions": n,
        "overall_over": "LoCoMo categories 1-4" if locomo else "all questions",
        "retrieval_only": retrieval_only,
        **blocks,
        "usage": {
            "build": {k: build_usage.get(k, 0) for k in USAGE_KEYS},
            "query": query_usage,
            "tokens_per_query": (query_usage["prompt_tokens"] + query_usage["completion_tokens"]) / n if n else None,
            "llm_calls_per_query": query_usage["llm_calls"] / n if n else None,
            # Per prompted stage, over the whole run (building and answering).
            "stages": {name: {k: usage.get(k, 0) for k in USAGE_KEYS} for name, usage in (stage_usage or {}).items()},
        },
        "timing": {
            "build_seconds": build_seconds,
            "query_seconds_p50": float(np.percentile(latencies, 50)) if latencies else None,
            "query_seconds_p90": float(np.percentile(latencies, 90)) if latencies else None,
            "build_wall_seconds": build_seconds if build_wall_seconds is None else build_wall_seconds,
            "query_wall_seconds_p50": float(np.percentile(wall_latencies, 50)) if wall_latencies else None,
        },
        "judge_info": judge_info,
        # Questions whose answering (or judging) raised: each row says why; the CLI exits non-zero.
        "failed_questions": sum(1 for row in rows if row.get("error")),
    }
    if (extra or {}).get("errata") is not None:
        metrics["audited"] = audited_blocks(rows)
    if retrieval_only:
        blocks = [metrics["overall"], *metrics["by_category"].values()]
        if "audited" in metrics:
            blocks += [metrics["audited"]["overall"], *metrics["audited"]["by_category"].values()]
        for block in blocks:
            for key in ANSWER_METRICS + ("context_tokens",):
                block[key] = None
                block["ci"][key] = None
    return metrics


def is_locomo(rows: list[dict[str, Any]]) -> bool:
    """Whether ``rows`` are LoCoMo's, whose overall leaves adversarial questions out; on other data
    (LongMemEval, whose "temporal" is not LoCoMo's) every question counts."""
    return bool(rows) and all(row["category"] in LOCOMO_CATEGORIES.values() for row in rows)


def audited_blocks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """metrics.json's ``audited``: the same predictions scored against the audited gold (each
    corrected row's ``audited`` scores in place of its own), and how many rows were corrected."""
    audited = [{**row, **row["audited"]} if row.get("audited") else row for row in rows]
    return {"questions_corrected": sum(1 for row in rows if row.get("audited")),
            **M.aggregate(audited, METRICS, ANSWERABLE_CATEGORIES if is_locomo(rows) else None)}


def format_table(metrics: dict[str, Any], columns: tuple[str, ...] | None = None) -> str:
    """The per-category table printed at the end of ``memlab run``."""
    if columns is None:
        columns = RETRIEVAL_METRICS[:4] + ("recall@tok1000",)
        if not metrics.get("retrieval_only"):
            columns = ("f1_locomo", "f1_amem", "bleu1", "abstained") + (("judge",) if metrics.get("judge_info") else ()) \
                + columns + ("context_tokens",)
    rows = [(name, block) for name, block in metrics["by_category"].items()]
    overall = "overall (1-4)" if metrics.get("overall_over") == "LoCoMo categories 1-4" else "overall"
    rows.append((overall, metrics["overall"]))
    width = max(len(name) for name, _ in rows)
    header = f"{'category':<{width}}  {'n':>4}  " + "  ".join(f"{c:>14}" for c in columns)
    lines = [header, "-" * len(header)]
    for name, block in rows:
        cells = []
        for c in columns:
            value = block.get(c)
            cells.append(f"{'-':>14}" if value is None else f"{value:>14.3f}" if c != "context_tokens"
                         else f"{value:>14.0f}")
        lines.append(f"{name:<{width}}  {block['n']:>4}  " + "  ".join(cells))
    usage, timing = metrics["usage"], metrics["timing"]
    lines.append("")
    lines.append(
        f"build: {timing['build_seconds']:.1f}s, {usage['build']['llm_calls']:.0f} LLM calls; "
        f"query: p50 {timing['query_seconds_p50'] or 0:.2f}s, p90 {timing['query_seconds_p90'] or 0:.2f}s, "
        f"{usage['tokens_per_query'] or 0:.0f} tokens/query"
    )
    return "\n".join(lines)
