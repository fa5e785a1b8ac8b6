"""CompassMem's search statistics (the paper's appendix Table 4) from a run's predictions.

    python eval/compassmem_search_stats.py RUN_DIR [RUN_DIR ...]

Prints, per run, one JSON object of ``memlab.pipelines.compassmem.search.run_search_statistics``
(each answer's trace has a ``search`` step), then the markdown table of them all.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlab.pipelines.compassmem.search import run_search_statistics, search_statistics_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    table = []
    for run in args.runs:
        path = run / "predictions.jsonl"
        try:
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            stats = run_search_statistics(rows)
        except (OSError, ValueError) as e:
            print(f"{run}: {e}", file=sys.stderr)
            return 2
        print(json.dumps({"run": str(run), **stats}))
        table.append((run.name, stats))
    print("\n" + search_statistics_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
