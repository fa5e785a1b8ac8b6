"""Question-type accuracy of routers side by side on the same held-out conversations (issue 5).

    python eval/compare_routers.py --data ../shared/data/locomo/locomo10_dev.json \
        --conversations conv-26,conv-30 --checkpoint checkpoints/router-minilm [--prompted-questions 60]

Rows: the rule router (``RuleRouter``), the prompted router with the default local LLM
(``PromptedRouter``; ``--prompted-questions N`` limits it to the first N questions of each
conversation, since each question is one LLM call), and each trained checkpoint. Prints one
JSON object per router (``memlab.training.stage_eval.evaluate_router``'s metrics) and a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from memlab.data import DataError, load_dataset, select_conversations
from memlab.stage import Stage
from memlab.stages.route import PromptedRouter, RuleRouter
from memlab.training.stage_eval import evaluate_router


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--conversations", required=True, help="comma-separated held-out conversation ids")
    parser.add_argument("--checkpoint", action="append", default=[], help="a saved router (repeatable)")
    parser.add_argument("--prompted-questions", type=int, default=0,
                        help="also run the prompted router on the first N questions of each conversation (0: skip)")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    args = parser.parse_args(argv)
    conversations = load_dataset(args.data)
    try:  # an unknown id is refused, never silently dropped
        conversations = select_conversations(conversations, args.conversations.split(","), source=args.data)
    except DataError as e:
        parser.error(str(e))
    routers = {"rule": (RuleRouter(), conversations)}
    for path in args.checkpoint:
        routers[path] = (Stage.load(path), conversations)
    if args.prompted_questions:
        from memlab.lm.llamacpp import LlamaCppLM

        subset = [dataclasses.replace(c, questions=c.questions[: args.prompted_questions]) for c in conversations]
        routers["prompted (first %d per conversation)" % args.prompted_questions] = (
            PromptedRouter(lm=LlamaCppLM(args.model, n_ctx=2048)), subset)
        # the other routers on the same subset, for a like-for-like row
        for name in list(routers):
            if not name.startswith("prompted"):
                routers[f"{name} (same subset)"] = (routers[name][0], subset)
    rows = []
    for name, (router, data) in routers.items():
        router.eval()
        result = evaluate_router(router, data)
        print(json.dumps({"router": name, **result}))
        rows.append(f"| {name} | {result['questions_4way']} | {result['accuracy']:.3f} | "
                    f"{result['accuracy_5way']:.3f} | {result['seconds_per_question'] * 1000:.1f} |")
    print("\n| router | questions (1-4) | accuracy (1-4) | accuracy (5-way) | ms/question |\n|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
