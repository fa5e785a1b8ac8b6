"""Fill the response cache with CompassMem's prompted construction calls (the teacher).

    python eval/compassmem_teacher_cache.py --data ../shared/data/locomo/locomo10_dev.json \
        conv-26 conv-41 conv-42 conv-43 conv-44 conv-47 conv-30 [--sessions N] \
        [--config configs/pipelines/compassmem.yaml] [--override KEY=VALUE ...]

Runs the pipeline's two construction steps, its segmenter and its ``relate``, on every session,
one session at a time (``memlab.training.teacher`` replays these calls as
the labels of the trained segmenter and relation classifier, and a prompted build or run of the
same config replays them for free). Resumable: a cached session costs nothing, so an
interrupted run picks up where it stopped. Prints one line per session (turns, events,
relations, seconds, whether a call failed). ``--sessions N`` labels each conversation's first N
sessions only (the cache is per session, so a later run with a larger N or none adds the rest;
``memlab.training.teacher`` skips what is not cached). One model job at a time: do not run it beside
another llama.cpp job. The committed teacher (``compassmem_teacher.yaml``) pins issue 23's
segmenter request; to add sessions to its labels, pass the same pins:
``--override segmenter.prompt=compassmem/event_extract_published --override segmenter.cite_turns=false``.
"""

from __future__ import annotations

import argparse
import sys
import time

from memlab.config import build_pipeline
from memlab.data import DataError, load_conversations
from memlab.stages.segment import SegmentIn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("conversations", nargs="+", help="conversation ids, in the order to build them")
    parser.add_argument("--data", required=True, help="LoCoMo JSON")
    parser.add_argument("--config", default="configs/pipelines/compassmem.yaml")
    parser.add_argument("--sessions", type=int, default=None, help="label each conversation's first N sessions only")
    parser.add_argument("--override", action="append", default=[], help="a config override KEY=VALUE (repeatable)")
    args = parser.parse_args(argv)
    try:
        conversations = load_conversations(args.data, args.conversations, args.sessions)
    except (DataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    pipeline = build_pipeline(args.config, args.override)[0]
    order = {c: i for i, c in enumerate(args.conversations)}
    for conversation in sorted(conversations, key=lambda c: order[c.id]):
        history = conversation.history()
        for session in (s for s in history.sessions if s.turns):
            started = time.monotonic()
            segmented = pipeline.segmenter([SegmentIn(history.id, session)])[0]
            related = pipeline.relate([(session, segmented.units)])[0]
            print(conversation.id, session.id, len(session.turns), len(segmented.units), len(related.relations),
                  f"{time.monotonic() - started:.0f}s", "failed" if segmented.error or related.error else "ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
