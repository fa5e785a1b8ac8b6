"""Write the causal links a MAGMA build forms, one JSON line each, for reading and checking by hand.

    python eval/causal_links.py CONFIG [key=value ...] --data PATH --conversations ID[,ID...]
                                [--sessions N] [--sample K] [--seed S] [--allow-training-overlap] --out FILE

Builds each conversation's memory with CONFIG (a MAGMA config; its trained stages' training
conversations are refused unless ``--allow-training-overlap``), then writes every causal edge
(``memlab.pipelines.magma.inspection.causal_links``; with ``--sample K``, K of them drawn at random
with ``--seed``). Prints the count of causal edges per conversation and session.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memlab.eval.scripting import add_build_arguments, pipeline_and_conversations, reports_script_errors
from memlab.fileio import atomic_file
from memlab.pipelines.magma.inspection import causal_links, sample_links


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
        links = causal_links(pipeline.build(conversation.history()), conversation.id)
        rows += links
        print(json.dumps({"conversation": conversation.id, "sessions": len(conversation.sessions),
                          "causal_edges": len(links),
                          "per_session": round(len(links) / max(len(conversation.sessions), 1), 2)}), flush=True)
    rows = sample_links(rows, args.sample, args.seed)
    with atomic_file(Path(args.out)) as tmp:
        tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
