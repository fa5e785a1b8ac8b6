"""Precision of hand-checked listings (``memlab.eval.hand_check``): per file, the rows, how many
were checked, the right ones and their share with Wilson's 95% interval; with ``--pool``, also
the files' rows taken together (one variant's listings from several conversations).

    python eval/hand_check.py runs/closings.jsonl runs/memberships.jsonl
    python eval/hand_check.py --pool eval/runs/mnemis-conv26/closings_guarded.jsonl eval/runs/mnemis-conv30/closings_guarded.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlab.eval.hand_check import precision, read_labelled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("labelled", type=Path, nargs="+")
    parser.add_argument("--pool", action="store_true", help="also score every file's rows together, as 'pooled'")
    args = parser.parse_args(argv)
    scores, pooled = {}, []
    for path in args.labelled:
        try:
            rows = read_labelled(path)
            scores[str(path)] = precision(rows)
        except (OSError, ValueError) as error:
            print(f"{path}: {error}", file=sys.stderr)
            return 2
        pooled += rows
    if args.pool:
        scores["pooled"] = precision(pooled)
    print(json.dumps(scores, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
