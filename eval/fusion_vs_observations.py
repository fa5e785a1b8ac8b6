"""Score CompassMem's cross-session links against LoCoMo's observations: are linked events about the same thing?

    python eval/fusion_vs_observations.py CONFIG [key=value ...] --data PATH --conversations ID[,ID...]
                                          [--percentile P] [--allow-training-overlap]

Builds each conversation's memory with CONFIG (a CompassMem config; use one whose construction
calls no LLM, or one whose calls are cached) and scores its links
(``memlab.training.fusion.links_against_observations``, embedder all-MiniLM-L6-v2, ``--percentile``
default 90). Prints per conversation and pooled: pairs, pairs related by the observations (the
base rate), pairs the memory links across sessions, and the links' precision and recall.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from memlab.embed import SentenceTransformerEmbedder
from memlab.eval.scripting import ScriptError, add_build_arguments, pipeline_and_conversations, reports_script_errors
from memlab.training.fusion import link_agreement, links_against_observations


@reports_script_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(parser, sessions=False)
    parser.add_argument("--percentile", type=float, default=90.0)
    args = parser.parse_args(argv)
    pipeline, conversations = pipeline_and_conversations(args)
    if any(not c.annotations for c in conversations):
        raise ScriptError("every conversation needs LoCoMo's observation annotations")
    embedder = SentenceTransformerEmbedder()
    pooled: Counter = Counter()
    for conversation in conversations:
        row = links_against_observations(pipeline.build(conversation.history()), conversation, embedder,
                                         args.percentile)
        print(json.dumps(link_agreement({"conversation": conversation.id, **row})), flush=True)
        pooled.update({k: v for k, v in row.items() if k != "threshold"})
    print(json.dumps(link_agreement({"conversation": "pooled", **pooled})))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
