"""Questions sent N at a time to a served model: wall time and answers against a sequential run.

    python eval/served_concurrency.py --server PATH/llama-server [--parallel 1,2,4] [--max-questions 12]
        [--config configs/pipelines/rag_turns.yaml] [--model qwen2.5-coder-1.5b-instruct-q4_k_m] [--threads 2]
        [--workload questions|generation]

For each N in ``--parallel`` it starts llama.cpp's server on 127.0.0.1 with N slots (``--parallel
N``, continuous batching; ``-c`` = N x 4096 so each slot keeps a 4096-token context), runs
``memlab run CONFIG`` on the embedded sample with the answerer served through
``OpenAICompatLM`` (``max_concurrency`` N, ``--batch-size`` N, a fresh response cache, so every
call reaches the server), and stops the server. It prints, per N, the run's wall time, the
speed-up over N = 1 and how many answers equal the N = 1 run's (greedy decoding; batched
matrix products can round differently from single ones).

``--workload generation`` isolates what slots can win on a CPU: 8 short prompts that each ask for
about 100 generated tokens (memory-bandwidth bound, where batching shares each weight read),
sent as one batch through ``OpenAICompatLM`` (no cache), timed per slot count.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from memlab.cli import configure_logging
from memlab.eval.runner import RunOptions, run_config
from memlab.lm import ChatRequest, OpenAICompatLM
from memlab.lm.models import DEFAULT_MODEL, resolve_model

TOPICS = ("a lighthouse keeper", "a lost violin", "a desert bakery", "a chess club", "a night train",
          "a rooftop garden", "a retired astronaut", "a village library")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(binary: str, model: Path, parallel: int, threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--parallel", str(parallel),
               "-c", str(4096 * parallel), "-t", str(threads), "--seed", "0", "-a", "served"]
    process = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"{binary} exited with {process.returncode}; see {log}")
        try:
            if requests.get(f"{base}/health", timeout=2).status_code == 200:
                return process, f"{base}/v1"
        except requests.RequestException:
            pass
        time.sleep(1)
    process.terminate()
    sys.exit(f"{binary} did not become healthy in 300 s; see {log}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="llama.cpp's llama-server binary")
    parser.add_argument("--parallel", default="1,2,4", help="comma-separated slot counts (the first is the reference)")
    parser.add_argument("--config", default="configs/pipelines/rag_turns.yaml")
    parser.add_argument("--max-questions", type=int, default=12)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workload", choices=("questions", "generation"), default="questions")
    args = parser.parse_args()
    configure_logging()
    model = resolve_model(args.model)
    work = Path(tempfile.mkdtemp(prefix="served-concurrency-"))
    results, reference = [], None
    for parallel in [int(p) for p in args.parallel.split(",")]:
        process, url = serve(args.server, model, parallel, args.threads, work / f"server-{parallel}.log")
        try:
            if args.workload == "generation":
                requests_ = [ChatRequest.of(f"Write a story of about 80 words about {t}.", max_tokens=100,
                                            temperature=0.0) for t in TOPICS]
                start = time.monotonic()
                replies = OpenAICompatLM("served", base_url=url, max_concurrency=parallel, cache=None).generate(requests_)
                wall = time.monotonic() - start
                answers = [r.text for r in replies]
                reference = reference or (wall, answers)
                results.append({"parallel": parallel, "questions": len(answers), "wall_s": round(wall, 1),
                                "speedup": round(reference[0] / wall, 2),
                                "same_answers": sum(a == b for a, b in zip(answers, reference[1])),
                                "llm_calls": len(replies), "f1_locomo": None,
                                "completion_tokens": sum(r.completion_tokens for r in replies)})
                print(json.dumps(results[-1]), flush=True)
                continue
            lm = (f"answerer.lm={{_component_: memlab.lm.OpenAICompatLM, model: served, base_url: '{url}', "
                  f"max_concurrency: {parallel}, cache: '{work / f'cache-{parallel}.sqlite'}'}}")
            start = time.monotonic()
            out, metrics = run_config(args.config, [lm], options=RunOptions(
                max_questions=args.max_questions, batch_size=parallel, progress=False), out=work / f"run-{parallel}")
            wall = time.monotonic() - start
        finally:
            process.terminate()
            process.wait(timeout=30)
        answers = [json.loads(line)["prediction"] for line in (out / "predictions.jsonl").read_text().splitlines()]
        reference = reference or (wall, answers)
        results.append({"parallel": parallel, "questions": len(answers), "wall_s": round(wall, 1),
                        "speedup": round(reference[0] / wall, 2),
                        "same_answers": sum(a == b for a, b in zip(answers, reference[1])),
                        "llm_calls": metrics["usage"]["query"]["llm_calls"],
                        "f1_locomo": round(metrics["overall"]["f1_locomo"], 3)})
        print(json.dumps(results[-1]), flush=True)
    print("\n| slots (requests at once) | requests | wall s | speed-up | replies equal to 1 slot's | LLM calls | F1 |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['parallel']} | {r['questions']} | {r['wall_s']} | {r['speedup']}x | {r['same_answers']} / "
              f"{r['questions']} | {r['llm_calls']} | {r['f1_locomo']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
