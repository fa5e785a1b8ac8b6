"""List every closed fact of a saved Mnemis memory for hand-checking
(``memlab.pipelines.mnemis.inspection.closings``, whose docstring says when a closing is right);
``eval/hand_check.py`` scores the labelled list.

    python eval/mnemis_closings.py memories/mnemis-conv26/conv-26 --out runs/closings.jsonl
    # after setting each "label" to "right" or "wrong" by reading:
    python eval/hand_check.py runs/closings.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memlab.embed import SentenceTransformerEmbedder
from memlab.eval.hand_check import write_listing
from memlab.pipelines.mnemis.inspection import closings
from memlab.pipelines.mnemis.memory import MnemisMemory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("memory", type=Path, help="a conversation's folder under --save-memory DIR")
    parser.add_argument("--embedder-path", default=None, help="the embedder the memory was built with (default MiniLM)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    memory = MnemisMemory.load(args.memory, SentenceTransformerEmbedder(path=args.embedder_path))
    rows = closings(memory)
    try:
        write_listing(args.out, rows)
    except FileExistsError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"{len(rows)} closings of {len(memory.facts)} facts -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
