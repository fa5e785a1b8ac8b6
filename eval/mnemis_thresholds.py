"""Carry Mnemis's similarity thresholds from one embedder to another, on a saved memory
(``memlab.pipelines.mnemis.thresholds``, whose docstring says how).

    python eval/mnemis_thresholds.py MEMORY REFERENCE_CONFIG TARGET_CONFIG
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlab.config import build_pipeline
from memlab.pipelines.mnemis.memory import MnemisMemory
from memlab.pipelines.mnemis.thresholds import carried


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("memory", type=Path, help="a conversation's folder under --save-memory DIR")
    parser.add_argument("reference", help="the Mnemis config whose embedder the thresholds were set for")
    parser.add_argument("target", help="the Mnemis config with the other embedder")
    args = parser.parse_args(argv)
    reference, target = build_pipeline(args.reference, [])[0], build_pipeline(args.target, [])[0]
    memory = MnemisMemory.load(args.memory, reference.embedder)
    print(json.dumps(carried(memory, reference, target), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
