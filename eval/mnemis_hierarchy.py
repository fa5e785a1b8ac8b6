"""Rebuild the category hierarchy of a saved Mnemis memory with a config's categorizer
(``memlab.pipelines.mnemis.inspection.remake_hierarchy``) and print what formed: each layer's
categories with their children, and the structure block.

    memlab run configs/pipelines/mnemis.yaml --data ../shared/data/locomo/locomo10_dev.json --conversations conv-26 \\
        --retrieval-only --save-memory memories/mnemis-conv26
    python eval/mnemis_hierarchy.py memories/mnemis-conv26/conv-26 configs/ablations/mnemis_llm_free_hierarchy.yaml

``--memberships OUT`` also writes a sample of (category, child) pairs to label by reading
(``inspection.memberships``); ``eval/hand_check.py`` scores them once labelled.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlab.config import build_pipeline
from memlab.eval.hand_check import write_listing
from memlab.pipelines.mnemis.inspection import layers_text, memberships, remake_hierarchy
from memlab.pipelines.mnemis.memory import MnemisMemory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("memory", type=Path, help="a conversation's folder under --save-memory DIR")
    parser.add_argument("config", help="a Mnemis config whose categorizer and hierarchy settings to use")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--json", type=Path, help="also write the structure block here")
    parser.add_argument("--memberships", type=Path, help="write a sample of (category, child) pairs to label here")
    parser.add_argument("--sample", type=int, default=60, help="pairs in --memberships (default 60)")
    args = parser.parse_args(argv)
    if args.memberships and args.memberships.exists():
        print(f"{args.memberships} exists: labels are never overwritten", file=sys.stderr)
        return 2
    pipeline = build_pipeline(args.config, args.overrides)[0]
    memory = MnemisMemory.load(args.memory, pipeline.embedder)
    try:
        structure = remake_hierarchy(memory, pipeline)
    except ValueError as e:
        print(f"{args.config}: {e}", file=sys.stderr)
        return 2
    print(layers_text(memory))
    print(json.dumps({k: v for k, v in structure.items() if k not in ("episodes", "facts")}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(structure, indent=1) + "\n", encoding="utf-8")
    if args.memberships:
        write_listing(args.memberships, memberships(memory, args.sample))
    return 0


if __name__ == "__main__":
    sys.exit(main())
