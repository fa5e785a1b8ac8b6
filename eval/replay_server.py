"""Serve a response cache as an OpenAI-compatible model with set latencies (``memlab.lm.replay_server``).

    python eval/replay_server.py --cache eval/caches/responses.sqlite --source-model 'llamacpp:...' \
        [--port 0] [--slots 8] [--request-s 0.02] [--prompt-token-s 0.0002] [--token-s 0.02] \
        [--max-requests 100000] [--max-seconds 3600] [--synthesize-misses N]
"""

from __future__ import annotations

import argparse
import json

from memlab.lm.replay_server import ReplayServer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="response cache (SQLite) holding the replies to replay")
    parser.add_argument("--source-model", required=True, help="the cached model whose replies are served (LM.name)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--request-s", type=float, default=0.02)
    parser.add_argument("--prompt-token-s", type=float, default=0.0002)
    parser.add_argument("--token-s", type=float, default=0.02)
    parser.add_argument("--max-requests", type=int, default=100_000)
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    parser.add_argument("--synthesize-misses", type=int, metavar="N", help="answer uncached requests with a "
                        "placeholder of N generated tokens instead of refusing them (timing only)")
    args = parser.parse_args()
    server = ReplayServer(args.cache, args.source_model, port=args.port, slots=args.slots, request_s=args.request_s,
                          prompt_token_s=args.prompt_token_s, token_s=args.token_s, max_requests=args.max_requests,
                          max_seconds=args.max_seconds, synthesize_misses=args.synthesize_misses).start()
    print(f"serving {args.source_model} from {args.cache} at {server.url}", flush=True)
    server._thread.join()
    print(json.dumps(server.counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
