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

from memlab.clock import active_seconds
from memlab.eval.scripting import add_build_arguments, pipeline_and_conversations, reports_script_errors


@reports_script_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(parser)
    args = parser.parse_args(argv)
    pipeline, conversations = pipeline_and_conversations(args)
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
