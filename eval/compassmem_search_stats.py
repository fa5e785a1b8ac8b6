"""CompassMem's search statistics (the paper's appendix Table 4) from a run's predictions.

    python eval/compassmem_search_stats.py RUN_DIR [RUN_DIR ...]

Reads ``predictions.jsonl`` (each answer's trace has a ``search`` step with the per-question
statistics of ``memlab.pipelines.compassmem.search.Search.stats``) and prints, per run, one
JSON object and a markdown table: time per question, subgoals and their satisfaction, initial
nodes, paths, steps, path lengths, the action mix, refinements and kept nodes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path


def search_stats(rows: list[dict]) -> dict[str, object]:
    """Table 4's aggregates over the questions whose trace has a search step."""
    found = [(row, step) for row in rows for step in (row.get("trace") or []) if step.get("step") == "search"]
    if not found:
        raise ValueError("no question of this run has a CompassMem search step in its trace")
    stats = [step for _, step in found]
    times = [row["latency_s"] for row, _ in found if row.get("latency_s") is not None]
    paths = [n for s in stats for n in s["path_lengths"]]
    actions = Counter()
    for s in stats:
        actions.update(s["actions"])
    total = sum(actions.values())
    mean = statistics.fmean
    return {
        "questions": len(stats),
        "time_mean_s": mean(times) if times else None, "time_median_s": statistics.median(times) if times else None,
        "subgoals_mean": mean(s["subgoals"] for s in stats),
        "satisfaction_mean": mean(s["satisfaction"] for s in stats),
        "fully_satisfied": sum(bool(s["fully_satisfied"]) for s in stats),
        "initial_nodes_mean": mean(s["initial_nodes"] for s in stats),
        "paths_mean": mean(s["paths"] for s in stats),
        "steps_mean": mean(s["steps"] for s in stats),
        "path_length_mean": mean(paths) if paths else 0.0, "path_length_max": max(paths, default=0),
        "actions": {a: actions[a] for a in ("EXPAND", "SKIP", "ANSWER")},
        "action_share": {a: actions[a] / total if total else 0.0 for a in ("EXPAND", "SKIP", "ANSWER")},
        "max_queue_mean": mean(s["max_queue"] for s in stats),
        "refinement_rate": mean(s["refinements"] > 0 for s in stats),
        "kept_mean": mean(s["kept"] for s in stats), "kept_max": max(s["kept"] for s in stats),
        "no_kept": sum(s["kept"] == 0 for s in stats),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    table = []
    for run in args.runs:
        path = run / "predictions.jsonl"
        try:
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            stats = search_stats(rows)
        except (OSError, ValueError) as e:
            print(f"{run}: {e}", file=sys.stderr)
            return 2
        print(json.dumps({"run": str(run), **stats}))
        table.append((run.name, stats))
    print("\n| run | questions | subgoals | satisfied | fully | paths | steps | path len (max) | EXPAND / SKIP / ANSWER | refined | kept (max) | none kept |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, s in table:
        share = s["action_share"]
        print(f"| {name} | {s['questions']} | {s['subgoals_mean']:.2f} | {s['satisfaction_mean']:.1%} | {s['fully_satisfied']} "
              f"| {s['paths_mean']:.2f} | {s['steps_mean']:.2f} | {s['path_length_mean']:.2f} ({s['path_length_max']}) "
              f"| {share['EXPAND']:.1%} / {share['SKIP']:.1%} / {share['ANSWER']:.1%} | {s['refinement_rate']:.1%} "
              f"| {s['kept_mean']:.2f} ({s['kept_max']}) | {s['no_kept']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
