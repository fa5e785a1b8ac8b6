"""Wall time of a run against a served model, by worker count and batch size (issue 45's scaling table).

    python eval/scaling.py --config configs/pipelines/rag_turns.yaml \
        --data ../shared/data/locomo/locomo10_dev.json --categories multi-hop,temporal,open-domain,single-hop \
        --workers 1,2,4,8,16 --batch-sizes 1,4 --slots 16 --out runs/scaling [--max-questions N] [--sessions N]
        [--retrieval-only] [--allow-training-overlap] [--synthesize-misses N] [--request-s S --prompt-token-s S --token-s S]

Every local llama.cpp model of the config is replaced by ``OpenAICompatLM`` pointed at a
``ReplayServer`` (``memlab.lm.replay_server``): a stand-in for a GPU server that replays the local
model's cached replies with set latencies and ``--slots`` concurrent sequences. The served LMs run
without a response cache, so every call reaches the server and waits its simulated time; every
other part of the pipeline (embedders, indexes, rerankers) runs for real on this machine. Each
cell is one ``memlab run`` (``run_config``) into ``OUT/w<workers>-b<batch>``; the table gives its
wall time, the ideal (the 1-worker, batch-1 time divided by the requests in flight, capped by the
slots), the server's busy time and whether its predictions equal the first cell's. A request the
cache lacks is a miss: the run records it as a failed question, and the table counts them; with
``--synthesize-misses N`` the server answers it with a placeholder instead (counted, timing only).
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

from memlab.cli import configure_logging
from memlab.config import dump_config, instantiate, load_config
from memlab.eval.runner import RunOptions, run_config
from memlab.lm.cache import default_cache_path
from memlab.lm.replay_server import ReplayServer

LOCAL_LM = "memlab.lm.llamacpp.LlamaCppLM"


def local_lm_nodes(tree, found=None) -> list[dict]:
    """Every llama.cpp LM node of a config tree (a node shared by YAML anchors once)."""
    found = [] if found is None else found
    if isinstance(tree, dict):
        if tree.get("_component_") == LOCAL_LM and not any(node is tree for node in found):
            found.append(tree)
        for value in tree.values():
            local_lm_nodes(value, found)
    elif isinstance(tree, list):
        for value in tree:
            local_lm_nodes(value, found)
    return found


def served_config(config: str, overrides: list[str], url: str, concurrency: int, folder: Path) -> tuple[Path, str]:
    """The config with its local model served from ``url``; returns its path and the local model's
    cache name (the replies the server replays)."""
    tree = load_config(config, overrides)
    nodes = local_lm_nodes(tree)
    names = {instantiate(copy.deepcopy(node)).name for node in nodes}
    if len(names) != 1:
        raise SystemExit(f"{config}: needs exactly one local model to serve, found {sorted(names) or 'none'}")
    for node in nodes:
        model = node["model"]
        node.clear()  # in place: nodes shared through YAML anchors stay shared
        node.update({"_component_": "memlab.lm.openai_compat.OpenAICompatLM", "model": model, "base_url": url,
                     "cache": None, "max_concurrency": concurrency, "context_window": 4096, "timeout_s": 600.0})
    path = folder / f"{Path(config).stem}-served.yaml"
    path.write_text(dump_config(tree), encoding="utf-8")
    return path, names.pop()


def predictions(folder: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    return [(row["question_id"], row["prediction"], tuple(map(tuple, row["retrieved"]))) for row in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--data", required=True)
    parser.add_argument("--conversations")
    parser.add_argument("--categories")
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--max-questions", type=int)
    parser.add_argument("--retrieval-only", action="store_true", help="no answering call (a build's scaling)")
    parser.add_argument("--allow-training-overlap", action="store_true",
                        help="time a trained stage on conversations it learnt from (a timing, never a score)")
    parser.add_argument("--workers", default="1,2,4,8,16")
    parser.add_argument("--batch-sizes", default="1")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--request-s", type=float, default=0.02)
    parser.add_argument("--prompt-token-s", type=float, default=0.0002)
    parser.add_argument("--token-s", type=float, default=0.02)
    parser.add_argument("--cache", default=str(default_cache_path()), help="the response cache to replay")
    parser.add_argument("--synthesize-misses", type=int, metavar="N",
                        help="answer requests the cache lacks with a placeholder of N tokens (memlab.lm.replay_server)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    configure_logging()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    options = dict(categories=tuple(args.categories.split(",")) if args.categories else None,
                   max_questions=args.max_questions, retrieval_only=args.retrieval_only,
                   allow_training_overlap=args.allow_training_overlap, progress=False)
    cells = [(int(w), int(b)) for b in args.batch_sizes.split(",") for w in args.workers.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for workers, batch in cells:
            with ReplayServer(args.cache, "", slots=args.slots, request_s=args.request_s,
                              prompt_token_s=args.prompt_token_s, token_s=args.token_s, max_seconds=7200,
                              synthesize_misses=args.synthesize_misses) as server:
                config, source = served_config(args.config, args.overrides, server.url, batch, Path(scratch))
                server.source_model = source
                folder = out / f"w{workers}-b{batch}"
                t0 = time.monotonic()
                _, metrics = run_config(config, data=args.data, sessions=args.sessions, out=folder, workers=workers,
                                        conversations=args.conversations.split(",") if args.conversations else None,
                                        options=RunOptions(batch_size=batch, **options))
                wall = time.monotonic() - t0
                counts = dict(server.counts)
            results.append({"workers": workers, "batch_size": batch, "wall_s": round(wall, 1),
                            "questions": metrics["n_questions"], "failed_questions": metrics.get("failed_questions", 0),
                            "build_errors": len(metrics.get("build_errors") or {}), **counts,
                            "same_predictions": predictions(folder) == predictions(out / f"w{cells[0][0]}-b{cells[0][1]}")})
            print(json.dumps(results[-1]), flush=True)
    base = results[0]["wall_s"]
    lines = ["| workers | batch | in flight | wall s | ideal s | speed-up | server busy s | requests | synthesized | "
             "misses | same predictions |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        in_flight = min(r["workers"] * r["batch_size"], args.slots)
        lines.append(f"| {r['workers']} | {r['batch_size']} | {in_flight} | {r['wall_s']:.0f} | {base / in_flight:.0f} | "
                     f"{base / r['wall_s']:.2f} | {r['busy_seconds']:.0f} | {r['replies']} | {r['synthesized']} | {r['misses']} | "
                     f"{'yes' if r['same_predictions'] else 'NO'} |")
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n", encoding="utf-8")
    (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
