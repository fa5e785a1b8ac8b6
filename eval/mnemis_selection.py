"""Score a Mnemis pipeline's own System-2 selector (the prompted one by default) by the descents
it makes, as ``memlab evaluate-stage CHECKPOINT --pipeline CONFIG`` scores a trained one.

    python eval/mnemis_selection.py [--pipeline CONFIG] --data PATH --conversations ID[,ID...]
                                    [--sessions N] [key=value ...]

The memories are the config's build replayed from the response cache (a build it does not hold is
an error naming the command that fills it); the selector's calls go to its LM (cached or not), and
``llm_calls_per_question`` counts them. Prints one JSON object
(``memlab.training.selection.evaluate_global_selector``).
"""

from __future__ import annotations

import argparse
import json
import sys

from memlab.data import DataError
from memlab.data.select import load_conversations
from memlab.training.selection import evaluate_global_selector_on


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default="configs/pipelines/mnemis.yaml")
    parser.add_argument("--data", required=True)
    parser.add_argument("--conversations", required=True, help="comma-separated conversation ids")
    parser.add_argument("--sessions", type=int, help="only the first N sessions of each conversation")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    try:
        conversations = load_conversations(args.data, args.conversations.split(","), sessions=args.sessions)
        result = evaluate_global_selector_on(None, conversations, args.pipeline, args.overrides)
    except (DataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"conversations": [c.id for c in conversations], "sessions": args.sessions, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
