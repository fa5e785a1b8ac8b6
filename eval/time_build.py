"""Time a pipeline's memory build, conversation by conversation, and count its LLM calls.

    python eval/time_build.py CONFIG --data PATH --conversations ID[,ID...] [--sessions N]
                              [--allow-training-overlap] [key=value ...]

Prints one JSON line per conversation (``memlab.eval.build_cost``): turns, build seconds, the
LLM calls, uncached calls and tokens the build made, and the memory's own statistics: what
BENCHMARKS.md reports as the build cost of CompassMem with trained construction stages, and the
shape of a memory without asking it a question.
"""

from __future__ import annotations

import argparse
import json

from memlab.eval.build_cost import build_costs
from memlab.eval.scripting import add_build_arguments, pipeline_and_conversations, reports_script_errors


@reports_script_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(parser)
    args = parser.parse_args(argv)
    pipeline, conversations = pipeline_and_conversations(args)
    for record in build_costs(pipeline, conversations):
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
