"""The ``memlab`` command.

  memlab run CONFIG [--data PATH] [--conversations ID,...] [--max-questions N]
                    [--categories NAMES] [--retrieval-only] [--out DIR] [key=value ...]
  memlab models
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

log = logging.getLogger("memlab")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memlab", description="Run and evaluate LLM-agent memory pipelines.")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="build memory and answer a benchmark's questions with a pipeline config")
    run.add_argument("config", help="pipeline YAML (configs/pipelines/*.yaml, configs/ablations/*.yaml)")
    run.add_argument("overrides", nargs="*", help="dotted overrides, e.g. answerer.lm.temperature=0")
    run.add_argument("--data", help="LoCoMo JSON or LongMemEval file/folder (default: the embedded sample)")
    run.add_argument("--conversations", help="comma-separated conversation ids to keep")
    run.add_argument("--max-questions", type=int, help="at most N questions per conversation")
    run.add_argument("--categories", help="comma-separated category names to keep (e.g. multi-hop,temporal)")
    run.add_argument("--retrieval-only", action="store_true",
                     help="stop after retrieval: evidence recall only, no answering call")
    run.add_argument("--out", help="output folder (default: runs/<config>-<time>)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    commands.add_parser("models", help="list the known local models and whether they are installed")
    return parser


def _csv(value: str | None) -> tuple[str, ...] | None:
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else None


def cmd_run(args: argparse.Namespace) -> int:
    from memlab.config import build_pipeline, dump_config, instantiate
    from memlab.data import DataError, load_dataset, load_sample
    from memlab.eval.report import format_table
    from memlab.eval.runner import RunOptions, run_benchmark

    overrides = list(args.overrides)
    pipeline, runner_settings, tree = build_pipeline(args.config, overrides)
    try:
        conversations = load_dataset(args.data) if args.data else load_sample()
    except DataError as e:
        log.error("%s", e)
        return 2
    wanted = _csv(args.conversations)
    if wanted:
        unknown = set(wanted) - {c.id for c in conversations}
        if unknown:
            log.error("unknown conversation ids %s (known: %s)", sorted(unknown), [c.id for c in conversations])
            return 2
        conversations = [c for c in conversations if c.id in wanted]
    options = RunOptions(
        retrieval_only=args.retrieval_only,
        max_questions=args.max_questions,
        categories=_csv(args.categories),
        progress=not args.no_progress,
    )
    judge_node = (runner_settings.get("eval") or {}).get("judge")
    judge = instantiate(judge_node) if judge_node and not args.retrieval_only else None
    out = Path(args.out or f"runs/{Path(args.config).stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(dump_config(tree))
    metrics = run_benchmark(
        pipeline,
        conversations,
        out,
        options,
        judge=judge,
        run_info={
            "pipeline": Path(args.config).stem,
            "config": str(args.config),
            "overrides": overrides,
            "data": str(args.data) if args.data else "embedded sample",
            "conversations": [c.id for c in conversations],
        },
    )
    for lm in pipeline.lms() + ([judge.lm] if judge is not None and hasattr(judge, "lm") else []):
        close = getattr(lm, "close", None)
        if callable(close):
            close()  # llama.cpp frees its model noisily if left to interpreter shutdown
    print(format_table(metrics))
    print(f"\nwrote {out / 'predictions.jsonl'} and {out / 'metrics.json'}")
    if metrics.get("failures"):
        print(f"unusable LLM outputs (after retry), by stage: {json.dumps(metrics['failures'])}")
    if metrics.get("stopped"):
        print(f"run stopped early: {metrics['stopped']}", file=sys.stderr)
        return 1
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from memlab.lm.models import model_status

    for status in model_status():
        print(json.dumps(status))
    return 0


def main(argv: list[str] | None = None) -> int:
    # memlab's own progress at INFO; libraries (faiss, bm25s, httpx ...) only when they warn.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    parser = _parser()
    # Overrides may come before or after options: argparse leaves the later ones unparsed.
    args, extra = parser.parse_known_args(argv)
    unknown = [e for e in extra if e.startswith("-") or "=" not in e]
    if unknown or (extra and args.command != "run"):
        parser.error(f"unrecognized arguments: {' '.join(unknown or extra)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    from memlab.config import ConfigError

    try:
        return {"run": cmd_run, "models": cmd_models}[args.command](args)
    except ConfigError as e:
        log.error("%s", e)
        return 2


if __name__ == "__main__":
    sys.exit(main())
