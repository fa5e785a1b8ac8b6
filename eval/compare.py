"""Run several pipeline configs on the same data and write one comparison table.

    python eval/compare.py --out runs/compare-conv26 --data ../shared/data/locomo/locomo10_dev.json \
        --conversations conv-26 --categories multi-hop,temporal,open-domain,single-hop \
        configs/pipelines/rag_turns.yaml configs/pipelines/simplemem.yaml

Each config runs as ``memlab run`` does (``memlab.eval.runner.run_config``) into ``OUT/<config name>/``;
a config whose ``metrics.json`` already exists there is not run again (``--rerun`` forces it),
and LLM calls go through the response cache, so an interrupted comparison resumes where it stopped.
The tables (markdown: the overall figures, then A-Mem F1 per question category) are printed
and written to ``OUT/table.md``. With ``--workers N`` (or ``--ray ADDRESS``) the configs run side
by side and every config's conversations are tasks over the same N workers
(``memlab.eval.workers``): an ablation table is one command that keeps every worker busy.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from memlab.cli import configure_logging
from memlab.eval.runner import RunOptions, run_config

COLUMNS = (
    ("f1_locomo", "F1 (LoCoMo)", "overall"),
    ("f1_amem", "F1 (A-Mem)", "overall"),
    ("bleu1", "BLEU-1", "overall"),
    ("judge", "judge", "overall"),
    ("recall@5", "R@5", "overall"),
    ("recall@10", "R@10", "overall"),
    ("recall@tok1000", "R@tok1000", "overall"),
    ("tokens_per_query", "tokens/query", "usage"),
    ("llm_calls", "LLM calls (build+query)", "calls"),
    ("build_seconds", "build s", "timing"),
    ("query_seconds_p50", "query s p50", "timing"),
)


def cell(metrics: dict, key: str, where: str) -> str:
    if where == "overall":
        value = metrics["overall"].get(key)
    elif where == "usage":
        value = metrics["usage"].get(key)
    elif where == "calls":
        value = metrics["usage"]["build"]["llm_calls"] + metrics["usage"]["query"]["llm_calls"]
    else:
        value = metrics["timing"].get(key)
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) and value < 10 else f"{value:.0f}"


def table(results: dict[str, dict]) -> str:
    header = "| pipeline | n | " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    lines = [header, "|" + "---|" * (len(COLUMNS) + 2)]
    for name, metrics in results.items():
        cells = " | ".join(cell(metrics, key, where) for key, _, where in COLUMNS)
        lines.append(f"| {name} | {metrics['overall']['n']} | {cells} |")
    return "\n".join(lines)


def category_table(results: dict[str, dict], key: str = "f1_amem") -> str:
    """``key`` per question category (LoCoMo's 1-4 first, in the papers' order), one row per pipeline."""
    order = ["multi-hop", "temporal", "open-domain", "single-hop"]
    seen = {c for metrics in results.values() for c in metrics.get("by_category", {})}
    categories = [c for c in order if c in seen] + sorted(seen - set(order))
    lines = [f"| {key} by category | " + " | ".join(categories) + " |", "|" + "---|" * (len(categories) + 1)]
    for name, metrics in results.items():
        cells = []
        for category in categories:
            value = metrics.get("by_category", {}).get(category, {}).get(key)
            cells.append("-" if value is None else f"{value:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _csv(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--data")
    parser.add_argument("--conversations", type=_csv)
    parser.add_argument("--categories", type=_csv)
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--max-questions", type=int)
    parser.add_argument("--retrieval-only", action="store_true")
    parser.add_argument("--batch-size", type=int, default=1,
                        help="questions per pipeline call (memlab run --batch-size)")
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes shared by every config's conversations (memlab run --workers): "
                        "the configs run side by side, their conversations as tasks over the same workers")
    parser.add_argument("--ray", metavar="ADDRESS", help="the same tasks on a Ray cluster (memlab run --ray)")
    parser.add_argument("--rerun", action="store_true")
    parser.add_argument("--set", action="append", default=[], help="override applied to every config")
    args = parser.parse_args(argv)
    configure_logging()
    options = RunOptions(retrieval_only=args.retrieval_only, max_questions=args.max_questions,
                         categories=args.categories or None, batch_size=args.batch_size)
    out = Path(args.out)
    todo = [config for config in args.configs
            if args.rerun or not (out / Path(config).stem / "metrics.json").is_file()]
    executor = None
    if todo and (args.workers > 1 or args.ray):
        from memlab.eval.workers import make_executor

        executor = make_executor(args.workers, args.ray)

    def run(config: str) -> None:
        name = Path(config).stem
        try:
            _, metrics = run_config(config, args.set, data=args.data, conversations=args.conversations,
                                    sessions=args.sessions, options=options, out=out / name, executor=executor)
        except ValueError as e:  # a bad config or bad data: the others still run
            print(f"{name}: {e}; continuing with the others", file=sys.stderr)
        else:
            if metrics.get("stopped"):
                print(f"{name}: stopped early ({metrics['stopped']}); continuing with the others", file=sys.stderr)

    try:
        if executor is None:
            for config in todo:
                run(config)
        else:  # every config's runner in its own thread, all feeding the one executor
            with ThreadPoolExecutor(max_workers=len(todo)) as threads:
                list(threads.map(run, todo))
    finally:
        if executor is not None:
            executor.shutdown()
    results: dict[str, dict] = {}
    for config in args.configs:
        run_dir = out / Path(config).stem
        if (run_dir / "metrics.json").is_file():
            results[Path(config).stem] = json.loads((run_dir / "metrics.json").read_text())
    text = table(results) + "\n\n" + category_table(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
