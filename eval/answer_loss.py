"""Where a run's answer score is lost: per category, the F1 each question misses (1 - F1) split
three ways, so a gain can be looked for where the loss is.

- **gold disputed**: the audit's errata change the question's gold answer (LoCoMo's
  ``locomo/audit/errata_dev.json``; answer-changing error types only);
- **evidence missing**: some gold evidence turn is not among the units the answerer read
  (``recall@context`` < 1 where the pipeline reports it, else ``recall@K`` with ``--k``);
- **evidence read, answer missed**: all of it was read and the answer still lost F1.

Questions without gold evidence count as "evidence read". The first that applies wins, in that
order.

    python eval/answer_loss.py eval/runs/conv26/rag_turns_best --errata ../shared/data/locomo/audit/errata_dev.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlab.data.errata import ANSWER_CHANGING, load_errata
from memlab.types import ANSWERABLE_CATEGORIES

BUCKETS = ("gold disputed", "evidence missing", "evidence read, answer missed")


def disputed_ids(errata: Path | None) -> set[str]:
    if errata is None:
        return set()
    return {c.question_id for c in load_errata(errata) if c.error_type in ANSWER_CHANGING}


def bucket(row: dict, disputed: set[str], k: int) -> str:
    if row["question_id"] in disputed:
        return BUCKETS[0]
    recall = row.get("recall@context")
    if recall is None:
        recall = row.get(f"recall@{k}")
    return BUCKETS[1] if recall is not None and recall < 1 else BUCKETS[2]


def loss_table(rows: list[dict], disputed: set[str], k: int, metric: str) -> dict[str, dict]:
    """Per category and overall (categories 1-4): n, mean ``metric``, and per bucket the
    questions and the F1 lost (a share of the category's loss)."""
    table: dict[str, dict] = {}
    for name in (*ANSWERABLE_CATEGORIES, "overall"):
        chosen = [r for r in rows if r["category"] in ANSWERABLE_CATEGORIES and (name == "overall" or r["category"] == name)]
        if not chosen:
            continue
        lost = {b: 0.0 for b in BUCKETS}
        count = {b: 0 for b in BUCKETS}
        for row in chosen:
            b = bucket(row, disputed, k)
            count[b] += 1
            lost[b] += 1.0 - (row.get(metric) or 0.0)
        total = sum(lost.values())
        table[name] = {"n": len(chosen), metric: sum(r.get(metric) or 0.0 for r in chosen) / len(chosen),
                       "lost": total, **{b: {"questions": count[b], "lost": lost[b],
                                              "share": lost[b] / total if total else 0.0} for b in BUCKETS}}
    return table


def markdown(table: dict[str, dict], metric: str) -> str:
    head = f"| category | n | {metric} | F1 lost | " + " | ".join(f"{b}: questions, share of loss" for b in BUCKETS)
    lines = [head + " |", "|" + "---|" * (4 + len(BUCKETS))]
    for name, block in table.items():
        cells = [f"{block[b]['questions']}, {block[b]['share']:.2f}" for b in BUCKETS]
        lines.append(f"| {name} | {block['n']} | {block[metric]:.3f} | {block['lost']:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (their predictions.jsonl are pooled)")
    parser.add_argument("--errata", type=Path, help="an errata file in the LoCoMo audit's format")
    parser.add_argument("--k", type=int, default=10, help="units read, for runs without recall@context (default 10)")
    parser.add_argument("--metric", default="f1_amem", help="the per-question score (default f1_amem)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    args = parser.parse_args(argv)
    rows = []
    for run in args.runs:
        path = run / "predictions.jsonl"
        if not path.is_file():
            print(f"{run}: no predictions.jsonl", file=sys.stderr)
            return 2
        rows += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    table = loss_table(rows, disputed_ids(args.errata), args.k, args.metric)
    print(json.dumps(table, indent=2) if args.json else markdown(table, args.metric))
    return 0


if __name__ == "__main__":
    sys.exit(main())
