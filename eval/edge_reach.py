"""Do CompassMem's relation edges lead to evidence that more dense hits would not? A search-free check.

    python eval/edge_reach.py CONFIG [key=value ...] --data PATH --conversations ID[,ID...]
                              [--sessions N] [--top-k K] [--allow-training-overlap]

Builds each conversation's memory with CONFIG (a CompassMem config; use one whose construction
calls no LLM, or one whose calls are cached). For each question of categories 1-4 whose evidence
some event holds, it compares two ways of spending the same budget beyond the dense top ``K``
events of the question (what the search starts from):

* **edges**: every event one relation edge away (either direction) from the top K: ``n`` more events;
* **dense**: the next ``n`` events of the dense ranking.

and counts (``memlab.training.navigation.reach``) the questions where each set holds an event with an evidence turn, and the
discordant ones (evidence reached only by the edges, only by the dense extension). The gold
evidence is read here, by the evaluation, to score the sets; no search is run. An upper bound on
what a navigator that walks one hop can gain over the dense list, for any policy.
"""

from __future__ import annotations

import argparse
import json

from memlab.eval.scripting import add_build_arguments, pipeline_and_conversations, reports_script_errors
from memlab.training.navigation import reach, reach_summary
from memlab.training.supervision import evaluable_questions


@reports_script_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(parser)
    parser.add_argument("--top-k", type=int, default=5, help="the dense start set (default 5, the pipeline's top_k)")
    args = parser.parse_args(argv)
    pipeline, conversations = pipeline_and_conversations(args)
    pooled: list[dict] = []
    for conversation in conversations:
        memory = pipeline.build(conversation.history())
        rows = [r for r in (reach(memory, q, args.top_k) for q in evaluable_questions(conversation)) if r]
        pooled += rows
        print(json.dumps({"conversation": conversation.id, **reach_summary(rows)}), flush=True)
    print(json.dumps({"conversation": "pooled", **reach_summary(pooled)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
