"""Precision of a hand-checked listing: each JSON line has a ``label`` set by reading, "right" or
"wrong" (null: not checked). What a row is and when it is right is the listing's script's rule
(``eval/mnemis_closings.py``: a closed fact; ``eval/mnemis_hierarchy.py --memberships``: a
category's child). Prints, per file, the rows, how many were checked, the right ones and their
share with Wilson's 95% interval; with ``--pool``, also the files' rows taken together (one variant's
listings from several conversations).

    python eval/hand_check.py runs/closings.jsonl runs/memberships.jsonl
    python eval/hand_check.py --pool eval/runs/mnemis-conv26/closings_guarded.jsonl eval/runs/mnemis-conv30/closings_guarded.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlab.eval.intervals import wilson_interval

LABELS = ("right", "wrong")


def score(rows: list[dict]) -> dict:
    labelled = [row for row in rows if row.get("label") is not None]
    unknown = sorted({row["label"] for row in labelled} - set(LABELS))
    if unknown:
        raise ValueError(f"labels must be one of {list(LABELS)}; found {unknown}")
    right = sum(row["label"] == "right" for row in labelled)
    low, high = wilson_interval(right, len(labelled)) if labelled else (None, None)
    return {"rows": len(rows), "checked": len(labelled), "right": right,
            "precision": right / len(labelled) if labelled else None, "ci": [low, high]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("labelled", type=Path, nargs="+")
    parser.add_argument("--pool", action="store_true", help="also score every file's rows together, as 'pooled'")
    args = parser.parse_args(argv)
    scores, pooled = {}, []
    for path in args.labelled:
        try:
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            scores[str(path)] = score(rows)
        except (OSError, ValueError) as error:
            print(f"{path}: {error}", file=sys.stderr)
            return 2
        if args.pool:
            pooled += rows
    if args.pool:
        scores["pooled"] = score(pooled)
    print(json.dumps(scores, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
