"""Closure precision of Mnemis's fact invalidation: list every closed fact of a saved memory for
hand-checking; ``eval/hand_check.py`` scores the checked list.

A closing is right when the new fact, as the conversation says it, makes the old fact no longer
true at the new fact's date (a move ends "lives in", a break-up ends "is dating", a cancelled
plan ends "plans to"); it is wrong when both can be true together (a topic neighbour, an
addition, a restatement) or when the new fact does not say what the quote claims. The checker
reads the two facts, the quote and, when in doubt, the episodes they came from; never the
questions or their answers.

    # list: one JSON line per closing, "label": null
    python eval/mnemis_closings.py memories/mnemis-conv26/conv-26 --out runs/closings.jsonl
    # after setting each "label" to "right" or "wrong" by reading:
    python eval/hand_check.py runs/closings.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlab.embed import SentenceTransformerEmbedder
from memlab.pipelines.mnemis.memory import MnemisMemory


def closings(memory: MnemisMemory) -> list[dict]:
    """Every closed fact with the fact that closed it and the quoted words, in fact order."""
    found = []
    for fact_id in memory.facts.units:
        edge = memory.fact_edge(fact_id)
        if edge["invalid_at"] is None:
            continue
        by = edge.get("invalidated_by") or None
        found.append({
            "fact": fact_id, "old": memory.facts.get(fact_id).text, "old_valid_at": str(edge["valid_at"]),
            "closed_at": str(edge["invalid_at"]), "new": memory.facts.get(by).text if by else None,
            "quote": edge.get("contradiction", ""),
            "new_episode": memory.facts.get(by).attributes["episode"] if by else None, "label": None})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("memory", type=Path, help="a conversation's folder under --save-memory DIR")
    parser.add_argument("--embedder-path", default=None, help="the embedder the memory was built with (default MiniLM)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"{args.out} exists: labels are never overwritten", file=sys.stderr)
        return 2
    memory = MnemisMemory.load(args.memory, SentenceTransformerEmbedder(path=args.embedder_path))
    rows = closings(memory)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(f"{len(rows)} closings of {len(memory.facts)} facts -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
