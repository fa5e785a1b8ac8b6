"""Carry CompassMem's similarity thresholds from one embedder to another, on dev conversations.

    python eval/calibrate_thresholds.py CONFIG [key=value ...] --data PATH --conversations ID[,ID...]
                                        [--events-from CONFIG2] [--sessions N] [--percentile P]
                                        [--allow-training-overlap]

The segmenter of CONFIG2 (default: CONFIG; use one with a trained segmenter, so no LLM is
called, e.g. compassmem_trained_construction.yaml) cuts each conversation into events and
CONFIG's embedder embeds them as CompassMem does (the event text). The sample is every event's
highest cosine to an event of an earlier session (``nearest_earlier_similarities``: the value
fusion compares with ``merge_threshold``), pooled over the conversations. Prints one JSON
object: the embedder's identity, the sample's size and quartiles, the percentile that the
config's ``merge_threshold`` and ``topic_threshold`` have in it, and, with ``--percentile P``,
the cosine at P. Run it on the reference embedder to read P, then on another embedder with
``--percentile P`` for its threshold of the same selectivity (BENCHMARKS.md, "Issue 40").
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from memlab.config import build_pipeline
from memlab.embed.similarity import nearest_earlier_similarities, percentile_of, value_at
from memlab.eval.scripting import ScriptError, add_build_arguments, pipeline_and_conversations, reports_script_errors
from memlab.stages.segment import SegmentIn


@reports_script_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(parser)
    parser.add_argument("--events-from", help="the config whose segmenter makes the events (default: CONFIG)")
    parser.add_argument("--percentile", type=float, help="also print the cosine at this percentile (0-100)")
    args = parser.parse_args(argv)
    segmenter = build_pipeline(args.events_from, [])[0].segmenter if args.events_from else None
    pipeline, conversations = pipeline_and_conversations(args, *([segmenter] if segmenter else []))
    segmenter = segmenter or pipeline.segmenter
    samples = []
    for conversation in conversations:
        history = conversation.history()
        sessions = [s for s in history.sessions if s.turns]
        outputs = segmenter([SegmentIn(history.id, s) for s in sessions])
        units = [(step, unit) for step, out in enumerate(outputs) for unit in out.units]
        vectors = pipeline.embedder.encode([unit.text for _, unit in units])
        samples.append(nearest_earlier_similarities(vectors, [step for step, _ in units]))
    sample = np.concatenate(samples) if samples else np.zeros(0)
    if not len(sample):
        raise ScriptError("no event after a conversation's first session to measure")
    result = {
        "embedder": pipeline.embedder.identity, "conversations": [c.id for c in conversations], "events": int(len(sample)),
        "quartiles": [round(value_at(p, sample), 4) for p in (25, 50, 75)],
        "merge_threshold": {"value": pipeline.merge_threshold,
                            "percentile": round(percentile_of(pipeline.merge_threshold, sample), 2)},
        "topic_threshold": {"value": pipeline.topic_threshold,
                            "percentile": round(percentile_of(pipeline.topic_threshold, sample), 2)},
    }
    if args.percentile is not None:
        result["at_percentile"] = {"percentile": args.percentile, "value": round(value_at(args.percentile, sample), 4)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
