"""Time a pipeline's memory build, conversation by conversation, and count its LLM calls.

    python eval/time_build.py CONFIG --data PATH --conversations ID[,ID...] [--sessions N]
                              [--allow-training-overlap] [key=value ...]

Prints one JSON line per conversation: turns, build seconds (wall time less suspensions,
``memlab.clock``: the build alone, no question is asked), the LLM calls (cached or not),
uncached calls and tokens the build made (summed over every LM of the pipeline), and the
memory's own statistics (``memory_stats``, its ``structure`` block included: what formed, and
what is degenerate): what BENCHMARKS.md reports as the build cost of CompassMem with trained
construction stages, and the shape of a memory without asking it a question.
"""

from __future__ import annotations

import argparse
import json
import sys

from memlab.clock import active_seconds
from memlab.config import build_pipeline
from memlab.data import DataError
from memlab.data.select import load_conversations
from memlab.stage import trained_conversations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--data", required=True)
    parser.add_argument("--conversations", required=True, help="comma-separated conversation ids")
    parser.add_argument("--sessions", type=int, help="only the first N sessions of each conversation")
    parser.add_argument("--allow-training-overlap", action="store_true",
                        help="time a build on conversations a trained stage learnt from (refused otherwise)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    pipeline, _, _ = build_pipeline(args.config, args.overrides)
    ids = args.conversations.split(",")
    overlap = sorted({i for learnt in trained_conversations(pipeline).values() for i in learnt} & set(ids))
    if overlap and not args.allow_training_overlap:
        print(f"error: a trained stage of {args.config} learnt from {overlap}; "
              "pass --allow-training-overlap to time it anyway", file=sys.stderr)
        return 2
    try:
        conversations = load_conversations(args.data, ids, sessions=args.sessions)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    pipeline.eval()
    lms = pipeline.lms()
    for conversation in conversations:
        before = [lm.usage.snapshot() for lm in lms]
        started = active_seconds()
        memory = pipeline.build(conversation.history())
        seconds = active_seconds() - started
        after = [lm.usage.snapshot() for lm in lms]
        usage = {key: sum(a[key] - b[key] for a, b in zip(after, before))
                 for key in ("llm_calls", "uncached_calls", "prompt_tokens", "completion_tokens")}
        print(json.dumps({"conversation": conversation.id, "turns": sum(len(s.turns) for s in conversation.sessions),
                          "sessions": len(conversation.sessions), "build_seconds": round(seconds, 1), **usage,
                          "memory": pipeline.memory_stats(memory)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
