"""Write the causal links a MAGMA build forms, one JSON line each, for reading and checking by hand.

    python eval/causal_links.py CONFIG [key=value ...] --data PATH --conversations ID[,ID...]
                                [--sessions N] [--sample K] [--seed S] [--allow-training-overlap] --out FILE

Builds each conversation's memory with CONFIG (a MAGMA config; its trained stages' training
conversations are refused unless ``--allow-training-overlap``), then writes every causal edge (or, with ``--sample K``, K of them
drawn at random with ``--seed``) as ``{conversation, cause, effect, score, cause_text,
effect_text, hand_checked_causal: null}``: a person sets ``hand_checked_causal`` to true or
false after reading the two events, and the file is the precision's evidence
(BENCHMARKS.md, "Issue 40"). Prints the count of causal edges per conversation and session.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from memlab.eval.scripting import add_build_arguments, pipeline_and_conversations, reports_script_errors
from memlab.fileio import atomic_file


@reports_script_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(parser)
    parser.add_argument("--sample", type=int, help="write K links drawn at random (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    pipeline, conversations = pipeline_and_conversations(args)
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
