"""``memlab compare``: several pipeline configs on the same data, one comparison table.

    memlab compare configs/pipelines/rag_turns.yaml configs/pipelines/simplemem.yaml --out runs/compare-conv26 \\
        --data ../shared/data/locomo/locomo10_dev.json --conversations conv-26 \\
        --categories multi-hop,temporal,open-domain,single-hop

Each config runs as ``memlab run`` does (``memlab.eval.runner.run_config``) into ``OUT/<config name>/``;
a config whose ``metrics.json`` already exists there is not run again (``--rerun`` forces it),
and LLM calls go through the response cache, so an interrupted comparison resumes where it
stopped. The tables (markdown: the overall figures, then A-Mem F1 per question category) are
printed and written to ``OUT/table.md``. With ``--workers N`` (or ``--ray ADDRESS``) the configs
run side by side and every config's conversations are tasks over the same N workers
(``memlab.eval.workers``). A config that fails (bad config or data) or stops early does not stop
the others, and makes the exit status 1. ``memlab sweep`` is the same with a file that also
fixes the question set and the judge, and a headline group.
"""

from __future__ import annotations

import argparse
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memlab.eval.runner import RunOptions, run_config

log = logging.getLogger("memlab")

#: The overall table's columns: (metric, title, where in metrics.json).
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
#: LoCoMo's answerable categories in the papers' order, first in the category table.
CATEGORY_ORDER = ("multi-hop", "temporal", "open-domain", "single-hop")


def cell(metrics: dict[str, Any], key: str, where: str) -> str:
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


def table(results: dict[str, dict[str, Any]]) -> str:
    """The overall figures, one row per run (``COLUMNS``)."""
    header = "| pipeline | n | " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    lines = [header, "|" + "---|" * (len(COLUMNS) + 2)]
    for name, metrics in results.items():
        cells = " | ".join(cell(metrics, key, where) for key, _, where in COLUMNS)
        lines.append(f"| {name} | {metrics['overall']['n']} | {cells} |")
    return "\n".join(lines)


def category_table(results: dict[str, dict[str, Any]], key: str = "f1_amem") -> str:
    """``key`` per question category (LoCoMo's 1-4 first, in the papers' order), one row per run."""
    seen = {c for metrics in results.values() for c in metrics.get("by_category", {})}
    categories = [c for c in CATEGORY_ORDER if c in seen] + sorted(seen - set(CATEGORY_ORDER))
    lines = [f"| {key} by category | " + " | ".join(categories) + " |", "|" + "---|" * (len(categories) + 1)]
    for name, metrics in results.items():
        cells = []
        for category in categories:
            value = metrics.get("by_category", {}).get(category, {}).get(key)
            cells.append("-" if value is None else f"{value:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compare_configs(configs: list[str], out: Path, overrides: list[str], options: RunOptions, *,
                    data: str | None = None, conversations: tuple[str, ...] | None = None,
                    sessions: int | None = None, workers: int = 1, ray: str | None = None,
                    rerun: bool = False) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Run each config not already finished in ``out`` (module docstring); the metrics of every
    finished one, by config name, and the names of those that failed or stopped early."""
    todo = [config for config in configs if rerun or not (out / Path(config).stem / "metrics.json").is_file()]
    failed: list[str] = []
    executor = None
    if todo and (workers > 1 or ray):
        from memlab.eval.workers import make_executor

        executor = make_executor(workers, ray)

    def run(config: str) -> None:
        name = Path(config).stem
        try:
            _, metrics = run_config(config, overrides, data=data, conversations=conversations, sessions=sessions,
                                    options=options, out=out / name, executor=executor)
        except ValueError as e:  # a bad config or bad data: the others still run
            log.error("%s: %s; continuing with the others", name, e)
            failed.append(name)
        else:
            if metrics.get("stopped"):
                log.error("%s: stopped early (%s); continuing with the others", name, metrics["stopped"])
                failed.append(name)

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
    results = {Path(config).stem: json.loads((out / Path(config).stem / "metrics.json").read_text())
               for config in configs if (out / Path(config).stem / "metrics.json").is_file()}
    return results, failed


def add_compare_parser(commands, path, names, positive, ray_address) -> None:
    """The command's parser on ``commands`` (argparse subparsers), with the CLI's argument types."""
    compare = commands.add_parser("compare", help="run several pipeline configs on the same data into one "
                                  "comparison table (memlab.eval.compare)")
    compare.add_argument("configs", type=path, nargs="+", help="pipeline YAMLs")
    compare.add_argument("--out", type=path, required=True, help="a run folder per config, and table.md")
    compare.add_argument("--data", type=path)
    compare.add_argument("--conversations", type=names)
    compare.add_argument("--categories", type=names)
    compare.add_argument("--sessions", type=positive)
    compare.add_argument("--max-questions", type=positive)
    compare.add_argument("--retrieval-only", action="store_true")
    compare.add_argument("--batch-size", type=positive, default=1, help="questions per pipeline call")
    compare.add_argument("--workers", type=positive, default=1, help="worker processes shared by every config's "
                         "conversations: the configs run side by side")
    compare.add_argument("--ray", metavar="ADDRESS", type=ray_address, help="the same tasks on a Ray cluster")
    compare.add_argument("--rerun", action="store_true", help="run the finished configs again")
    compare.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="a dotted override applied to every config (repeatable)")


def cmd_compare(args: argparse.Namespace) -> int:
    from memlab.fileio import refuse_writing_into

    refuse_writing_into(args.out, "--out", {"--data": args.data,
                                            **{f"the config {c}": c for c in args.configs}})
    options = RunOptions(retrieval_only=args.retrieval_only, max_questions=args.max_questions,
                         categories=tuple(args.categories) if args.categories else None, batch_size=args.batch_size)
    out = Path(args.out)
    results, failed = compare_configs([str(c) for c in args.configs], out, list(args.overrides), options,
                                      data=args.data, conversations=tuple(args.conversations or ()) or None,
                                      sessions=args.sessions, workers=args.workers, ray=args.ray, rerun=args.rerun)
    text = table(results) + "\n\n" + category_table(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 1 if failed else 0
