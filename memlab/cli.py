"""The ``memlab`` command.

  memlab run CONFIG [--data PATH] [--conversations ID,...] [--sessions N] [--max-questions N]
                    [--categories NAMES] [--retrieval-only] [--batch-size N] [--out DIR] [key=value ...]
  memlab train RECIPE --config PATH [key=value ...]
  memlab evaluate-stage CHECKPOINT_DIR [--data PATH] [--conversations ID,...] [--sessions N]
  memlab models
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
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
    run.add_argument("--sessions", type=int,
                     help="keep each conversation's first N sessions and the questions whose evidence lies in them")
    run.add_argument("--max-questions", type=int, help="at most N questions per conversation")
    run.add_argument("--categories", help="comma-separated category names to keep (e.g. multi-hop,temporal)")
    run.add_argument("--batch-size", type=_positive, default=1,
                     help="questions handed to the pipeline at once (default 1: each one timed alone)")
    run.add_argument("--retrieval-only", action="store_true",
                     help="stop after retrieval: evidence recall only, no answering call")
    run.add_argument("--out", help="output folder (default: runs/<config>-<time>)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    train = commands.add_parser("train", help="run a training recipe (train/<RECIPE>.py) with its config")
    train.add_argument("recipe", help="recipe name, e.g. finetune_reranker (a script in train/)")
    train.add_argument("--config", required=True, help="training YAML (configs/train/*.yaml)")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. optim.lr=1e-4 output_dir=checkpoints/x")

    evaluate = commands.add_parser("evaluate-stage", help="evaluate a saved stage (reranker or router) on data")
    evaluate.add_argument("checkpoint", help="folder written by Stage.save (e.g. checkpoints/reranker-minilm-turns)")
    evaluate.add_argument("--data", help="LoCoMo JSON (default: the embedded sample)")
    evaluate.add_argument("--conversations", help="comma-separated conversation ids to keep")
    evaluate.add_argument("--sessions", type=int, help="as for run")
    evaluate.add_argument("--depth", type=int, default=50,
                          help="reranker: first-stage candidates re-ranked per question (default 50)")

    commands.add_parser("models", help="list the known local models and whether they are installed")
    return parser


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return number


def _csv(value: str | None) -> tuple[str, ...] | None:
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else None


def cmd_run(args: argparse.Namespace) -> int:
    from memlab.eval.report import format_table
    from memlab.eval.runner import RunOptions, run_config

    options = RunOptions(
        retrieval_only=args.retrieval_only,
        max_questions=args.max_questions,
        categories=_csv(args.categories),
        progress=not args.no_progress,
        batch_size=args.batch_size,
    )
    try:  # ConfigError and DataError are ValueErrors, as is a bad ``sessions``: bad input, reported
        out, metrics = run_config(args.config, args.overrides, data=args.data, conversations=_csv(args.conversations),
                                  sessions=args.sessions, options=options, out=args.out)
    except ValueError as e:
        log.error("%s", e)
        return 2
    print(format_table(metrics))
    print(f"\nwrote {out / 'predictions.jsonl'} and {out / 'metrics.json'}")
    if metrics.get("failures"):
        print(f"unusable LLM outputs (after retry), by stage: {json.dumps(metrics['failures'])}")
    if metrics.get("stopped"):
        print(f"run stopped early: {metrics['stopped']}", file=sys.stderr)
        return 1
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from memlab.training import load_recipe_config, run_recipe

    config = load_recipe_config(args.config, list(args.overrides))
    if config["recipe"] != args.recipe:
        log.error("%s is a config for recipe %r, not %r", args.config, config["recipe"], args.recipe)
        return 2
    summary = run_recipe(args.recipe, config)
    print(json.dumps(summary, indent=2, default=str))
    return 0


def cmd_evaluate_stage(args: argparse.Namespace) -> int:
    from memlab.data import DataError, load_conversations
    from memlab.embed import SentenceTransformerEmbedder
    from memlab.stage import Stage, StageError
    from memlab.stages.rerank import Reranker
    from memlab.stages.route import IntentRouter
    from memlab.training.stage_eval import evaluate_reranker, evaluate_router, reranker_candidates

    try:
        stage = Stage.load(args.checkpoint)
        conversations = load_conversations(args.data, _csv(args.conversations), args.sessions)
    except (StageError, DataError, ValueError) as e:
        log.error("%s", e)
        return 2
    stage.eval()
    if isinstance(stage, Reranker):
        items = reranker_candidates(conversations, SentenceTransformerEmbedder(), depth=args.depth)
        result = evaluate_reranker(stage, items)
    elif isinstance(stage, IntentRouter):
        result = evaluate_router(stage, conversations)
    else:
        log.error("%s: evaluate-stage knows rerankers and routers, not %s", args.checkpoint, type(stage).__name__)
        return 2
    result = {"checkpoint": str(args.checkpoint), "stage": type(stage).__name__,
              "data": args.data or "embedded sample", "conversations": [c.id for c in conversations], **result}
    # A recipe's checkpoint records its split: scoring it on conversations it learnt from inflates the numbers.
    training = Path(args.checkpoint) / "training.json"
    split = json.loads(training.read_text()).get("split") if training.is_file() else None
    if split:
        seen = {*split.get("train", []), *split.get("validation", [])}
        result["overlaps_training"] = [c.id for c in conversations if c.id in seen]
        if result["overlaps_training"]:
            log.warning("%s was trained or validated on %s: its scores there are not held-out scores",
                        args.checkpoint, result["overlaps_training"])
    print(json.dumps(result, indent=2))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from memlab.lm.models import model_status

    for status in model_status():
        print(json.dumps(status))
    return 0


def configure_logging() -> None:
    """memlab's own progress at INFO; libraries (faiss, bm25s, httpx ...) only when they warn."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    parser = _parser()
    # Overrides may come before or after options: argparse leaves the later ones unparsed.
    args, extra = parser.parse_known_args(argv)
    unknown = [e for e in extra if e.startswith("-") or "=" not in e]
    if unknown or (extra and args.command not in ("run", "train")):
        parser.error(f"unrecognized arguments: {' '.join(unknown or extra)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    from memlab.config import ConfigError

    try:
        commands = {"run": cmd_run, "train": cmd_train, "evaluate-stage": cmd_evaluate_stage, "models": cmd_models}
        return commands[args.command](args)
    except ConfigError as e:
        log.error("%s", e)
        return 2


if __name__ == "__main__":
    sys.exit(main())
