"""Carry CompassMem's similarity thresholds from one embedder to another, on dev conversations.

    python eval/calibrate_thresholds.py CONFIG [key=value ...] --data PATH --conversations ID[,ID...]
                                        [--events-from CONFIG2] [--sessions N] [--percentile P]
                                        [--allow-training-overlap]

The segmenter of CONFIG2 (default: CONFIG; use one with a trained segmenter, so no LLM is
called, e.g. compassmem_trained_construction.yaml) cuts each conversation into events and
CONFIG's embedder embeds them (``memlab.pipelines.compassmem.thresholds``). Prints one JSON
object: the embedder's identity, the sample's size and quartiles, the percentile that the
config's ``merge_threshold`` and ``topic_threshold`` have in it, and, with ``--percentile P``,
the cosine at P. Run it on the reference embedder to read P, then on another embedder with
``--percentile P`` for its threshold of the same selectivity (BENCHMARKS.md, "Issue 40").
"""

from __future__ import annotations

import argparse
import json

from memlab.config import build_pipeline
from memlab.eval.scripting import ScriptError, add_build_arguments, pipeline_and_conversations, reports_script_errors
from memlab.pipelines.compassmem.thresholds import earlier_event_similarities, threshold_percentiles


@reports_script_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(parser)
    parser.add_argument("--events-from", help="the config whose segmenter makes the events (default: CONFIG)")
    parser.add_argument("--percentile", type=float, help="also print the cosine at this percentile (0-100)")
    args = parser.parse_args(argv)
    segmenter = build_pipeline(args.events_from, [])[0].segmenter if args.events_from else None
    pipeline, conversations = pipeline_and_conversations(args, *([segmenter] if segmenter else []))
    sample = earlier_event_similarities(segmenter or pipeline.segmenter, pipeline.embedder, conversations)
    try:
        result = threshold_percentiles(pipeline, sample, args.percentile)
    except ValueError as e:
        raise ScriptError(str(e)) from None
    print(json.dumps({"embedder": pipeline.embedder.identity, "conversations": [c.id for c in conversations],
                      **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
