"""Re-measure cached LLM calls whose recorded latency includes a pause or a contended core, on a
local model (``memlab.lm.retime``, whose docstring says which entries and how).

    python eval/retime_cache.py --contains Caroline --dry-run     # list what would be re-run
    python eval/retime_cache.py --contains Caroline --n-threads 2

Run it with the cores otherwise idle, or the new figures carry the contention instead.
"""

from __future__ import annotations

import argparse
import sys

from memlab.lm import LlamaCppLM
from memlab.lm.cache import ResponseCache
from memlab.lm.models import DEFAULT_MODEL
from memlab.lm.retime import RetimeError, retime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="local model (llama.cpp) whose entries to check")
    parser.add_argument("--n-threads", type=int, default=None, help="llama.cpp threads (as in the original runs)")
    parser.add_argument("--cache", default="default", help="response cache file")
    parser.add_argument("--contains", default="", help="only requests whose text contains this")
    parser.add_argument("--factor", type=float, default=2.5)
    parser.add_argument("--slack", type=float, default=30.0, help="seconds")
    parser.add_argument("--length-tolerance", type=float, default=0.1,
                        help="a different reply counts unless it is shorter by more than this fraction")
    parser.add_argument("--dry-run", action="store_true", help="list the suspects, re-run nothing")
    args = parser.parse_args(argv)
    cache = ResponseCache.open(args.cache)
    # A larger context than any config uses: the KV cache size does not change the replies.
    lm = LlamaCppLM(model=args.model, cache=None, n_threads=args.n_threads, n_ctx=8192)
    try:
        report = retime(cache, lm, contains=args.contains, factor=args.factor, slack_s=args.slack,
                        length_tolerance=args.length_tolerance, dry_run=args.dry_run)
    except RetimeError as e:
        print(f"retime_cache: {e}", file=sys.stderr)
        return 2
    print("| prompt tok | completion tok | recorded s | predicted s | new completion tok | new s | status |")
    print("|---|---|---|---|---|---|---|")
    for r in report:
        new_tokens, new_s = (r[k] if r[k] is not None else "-" for k in ("new_completion_tokens", "new_s"))
        print(f"| {r['prompt_tokens']} | {r['completion_tokens']} | {r['recorded_s']} | {r['predicted_s']} "
              f"| {new_tokens} | {new_s} | {r['status']} |")
    print(f"{len(report)} suspect entries; recorded {sum(r['recorded_s'] for r in report):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
