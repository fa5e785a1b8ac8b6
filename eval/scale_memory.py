"""The memory layer from 10k to 1M units (``memlab.eval.memory_scale``): each (size, index) in its own
process, so its resident memory is its own; one JSON line per run to ``OUT/scale.jsonl`` (a
finished run is skipped when the script is run again) and the markdown table to ``OUT/scale.md``.

    python eval/scale_memory.py --data ../shared/data/locomo/locomo10_dev.json --out runs/scale \
        [--sizes 10000,100000,1000000] [--queries 500]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from memlab.eval.memory_scale import MODES, base_corpus, encoder_speed, run_graph, run_memory, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--modes", default="exact,approximate,graph", help=f"of {', '.join(MODES)}")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # SIZE:MODE, run in a child process
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = base_corpus(args.data, out)
    if args.one:
        size, mode = args.one.split(":")
        if mode == "encoder":
            row = encoder_speed(corpus)
        elif mode == "graph":
            row = run_graph(int(size), corpus, args.queries)
        else:
            row = run_memory(int(size), mode, corpus, args.queries)
        print(json.dumps(row), flush=True)
        return 0
    results = out / "scale.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()] if results.is_file() else []
    done = {(r.get("units"), r["index"]) for r in rows}
    jobs = [(None, "encoder")] + [(int(s), m) for s in args.sizes.split(",") for m in args.modes.split(",")]
    for size, mode in jobs:
        if (size, mode) in done:
            continue
        child = subprocess.run([sys.executable, __file__, "--data", args.data, "--out", args.out,
                                "--queries", str(args.queries), "--one", f"{size}:{mode}"],
                               capture_output=True, text=True)
        if child.returncode != 0:
            print(f"error: {size} units, {mode}: the run failed:\n{child.stderr[-3000:]}", file=sys.stderr)
            return 1
        row = json.loads(child.stdout.strip().splitlines()[-1])
        with open(results, "a") as f:
            f.write(json.dumps(row) + "\n")
        rows.append(row)
        print(json.dumps(row), flush=True)
    order = {m: i for i, m in enumerate(("encoder", *MODES))}
    rows.sort(key=lambda r: (order[r["index"]] if r["index"] == "encoder" else 1, r.get("units") or 0,
                             order[r["index"]]))
    (out / "scale.md").write_text(table(rows))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
