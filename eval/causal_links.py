"""Write the causal links a MAGMA build forms, one JSON line each, for reading and checking by hand.

    python eval/causal_links.py CONFIG [key=value ...] --data PATH --conversations ID[,ID...]
                                [--sessions N] [--sample K] [--seed S] --out FILE

Builds each conversation's memory with CONFIG (a MAGMA config; its trained stages' training
conversations are refused), then writes every causal edge (or, with ``--sample K``, K of them
drawn at random with ``--seed``) as ``{conversation, cause, effect, score, cause_text,
effect_text, hand_checked_causal: null}``: a person sets ``hand_checked_causal`` to true or
false after reading the two events, and the file is the precision's evidence
(BENCHMARKS.md, "Issue 40"). Prints the count of causal edges per conversation and session.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from memlab.config import build_pipeline
from memlab.data import DataError
from memlab.data.select import load_conversations
from memlab.fileio import atomic_file
from memlab.stage import trained_conversations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--data", required=True)
    parser.add_argument("--conversations", required=True, help="comma-separated conversation ids")
    parser.add_argument("--sessions", type=int, help="only the first N sessions of each conversation")
    parser.add_argument("--sample", type=int, help="write K links drawn at random (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    pipeline, _, _ = build_pipeline(args.config, args.overrides)
    ids = args.conversations.split(",")
    overlap = sorted({i for learnt in trained_conversations(pipeline).values() for i in learnt} & set(ids))
    if overlap:
        print(f"error: a trained stage of {args.config} learnt from {overlap}", file=sys.stderr)
        return 2
    try:
        conversations = load_conversations(args.data, ids, sessions=args.sessions)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    pipeline.eval()
    rows = []
    for conversation in conversations:
        memory = pipeline.build(conversation.history())
        edges = memory.graph.edges("causal")
        for cause, effect, data in edges:
            rows.append({"conversation": conversation.id, "cause": cause, "effect": effect, "score": data.get("weight"),
                         "cause_text": memory.unit(cause).text, "effect_text": memory.unit(effect).text,
                         "hand_checked_causal": None})
        print(json.dumps({"conversation": conversation.id, "sessions": len(conversation.sessions),
                          "causal_edges": len(edges),
                          "per_session": round(len(edges) / max(len(conversation.sessions), 1), 2)}), flush=True)
    if args.sample is not None and args.sample < len(rows):
        rows = random.Random(args.seed).sample(rows, args.sample)
    with atomic_file(Path(args.out)) as tmp:
        tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
