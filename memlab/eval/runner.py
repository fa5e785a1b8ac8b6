"""The benchmark loop: build memory per conversation, answer its questions, score, write.

``run_config`` builds a pipeline config's pipeline, judge and conversations and runs
``run_benchmark`` (what ``memlab run`` and ``memlab compare`` call), which writes into ``out_dir``:

* ``predictions.jsonl`` — one line per question (gold data next to what the pipeline did);
  written as ``predictions.jsonl.partial`` while running (a batch's rows as soon as they are
  answered, in the conversations' order) and renamed when the run ends, so a complete file is
  never confused with an interrupted one;
* ``builds.jsonl.partial`` — while running, one line per finished build (``build_record``: its
  seconds, LLM use and memory statistics), so an unfinished run still shows what its builds cost
  (``memlab sweep`` reports it); removed when the run ends, as ``metrics.json`` sums them;
* ``building.json.partial`` — while a build runs in this process, what it has cost so far
  (rewritten every minute), so a build of hours shows before it ends; removed with it;
* ``metrics.json`` — the aggregate (see ``memlab.eval.report.summarise``), written atomically.

Each conversation is built and answered by ``memlab.eval.conversation.run_conversation`` (what
the pipeline sees, batches, a failing question recorded and the run going on, a model that is
unavailable stopping the run cleanly, keeping what was done). ``metrics.json`` counts what failed
(``failed_questions``, ``build_errors``, ``failures`` per stage, ``stopped``) so that the CLI
exits non-zero when anything did.

``save_to`` (``memlab run --save-memory``) saves each built memory once its questions are answered
(released, so a MAGMA memory is saved consolidated); ``load_from`` (``--memory``) answers from
saved memories instead of building (``memlab.eval.saved_memories``; build time is then the load
time, and ``metrics.json`` says where the memories came from).

Conversations run one after another in this process (``in_process``), or as tasks in worker
processes or on a Ray cluster (``run_config(workers=N, ray=...)``, ``memlab.eval.workers``): either
way each yields a ``ConversationResult`` and ``run_benchmark`` writes them in the conversations'
order, so the run folder does not depend on how it was run.

``run_config`` refuses bad input before anything runs: unknown categories, an ``out`` that is
a file or holds something other than a run, and a pipeline holding a trained stage whose
checkpoint learnt from the conversations to be run (unless
``RunOptions.allow_training_overlap``; the overlap is recorded in ``metrics.json`` as
``training_overlap`` either way). It writes the run into a fresh sibling folder that replaces
``out`` only when the run ends, so a run folder never mixes two runs.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from memlab.config import Overrides
from memlab.data.errata import apply_errata, load_errata
from memlab.eval.conversation import (  # noqa: F401 - RunOptions and context_recall are imported from here too
    ConversationResult,
    RunOptions,
    cached_call_seconds,
    close_lms,
    context_recall,
    run_conversation,
    run_lms,
    select_questions,
)
from memlab.eval.machine import machine_info
from memlab.eval.saved_memories import SavedMemories
from memlab.fileio import atomic_folder, refuse_writing_into, replaceable_folder_problem, write_json_atomic
from memlab.held_out import refuse_training_overlap, training_overlap
from memlab.pipelines.base import Pipeline
from memlab.types import Conversation

log = logging.getLogger(__name__)


def run_config(
    config: str | os.PathLike,
    overrides: Overrides = (),
    *,
    data: str | os.PathLike | None = None,
    conversations: Sequence[str] | None = None,
    sessions: int | None = None,
    options: RunOptions = RunOptions(),
    out: str | os.PathLike | None = None,
    save_memory: str | os.PathLike | None = None,
    memory: str | os.PathLike | None = None,
    errata: str | os.PathLike | None = None,
    workers: int = 1,
    ray: str | None = None,
    executor=None,
    on_progress=None,
) -> tuple[Path, dict[str, Any]]:
    """Run the pipeline config ``config`` (with ``overrides``: ``key=value`` strings or a mapping of
    dotted keys to values, ``memlab.config.load_config``) on ``data`` (None: the
    embedded sample; ``conversations``, ``sessions`` as in ``memlab.data.load_conversations``)
    into ``out`` (default ``runs/<config>-<time>``, with the resolved ``config.yaml``); returns
    the folder and the metrics. ``save_memory`` / ``memory``: a folder to save the built memories
    into / to answer from (module docstring). ``errata``: an errata file whose audited gold is
    scored beside the original (``memlab.data.errata``; default: the config's ``eval.errata``).
    ``workers`` > 1: conversations run in that many worker processes; ``ray``: on a Ray cluster
    (its address, ``auto`` for the running one, ``local`` for a private one) with ``workers``
    tasks at a time (``memlab.eval.workers``); ``executor``: an ``Executor`` to share with other
    runs (a sweep), which the caller shuts down; ``on_progress(staging)``: called with the staging
    folder each time its progress files grow (``run_benchmark``). Bad input (config, data, categories, ``out``, a trained stage
    scored on its own training conversations) raises a ``ValueError`` (``ConfigError``,
    ``DataError`` ...) before anything runs."""
    from memlab.config import build_pipeline, dump_config, instantiate, split_runner_keys
    from memlab.eval.saved_memories import build_config

    overrides = dict(overrides) if isinstance(overrides, Mapping) else list(overrides)
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    for name, path in (("--out", out), ("--save-memory", save_memory), ("--memory", memory), ("--data", data),
                       ("--errata", errata)):
        if path is not None and not str(path).strip():
            raise ValueError(f"{name} is empty: give a path, or leave the option out")
    folder = Path(out if out is not None else f"runs/{Path(config).stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    inputs = {"the config": config, "--data": data, "--errata": errata, "--memory": memory}
    refuse_writing_into(folder, "--out", {**inputs, "--save-memory": save_memory})
    if save_memory is not None:
        refuse_writing_into(save_memory, "--save-memory", {**inputs, "the run folder --out": folder})
    check_run_folder(folder)
    pipeline, runner_settings, tree = build_pipeline(config, overrides)
    errata = errata if errata is not None else (runner_settings.get("eval") or {}).get("errata")
    selected, applied = select_conversations(data, conversations, sessions, errata, options.categories)
    refuse_training_overlap(pipeline, selected, options.allow_training_overlap)
    if save_memory is not None and memory is not None:
        raise ValueError("give --save-memory or --memory, not both: a loaded memory is saved already")
    config_of_build = build_config(split_runner_keys(tree)[0], pipeline)
    answered = [c for c in selected if select_questions(c, options)]
    save_to = SavedMemories.for_saving(save_memory, config_of_build) if save_memory is not None else None
    load_from = SavedMemories.for_loading(memory, config_of_build, answered) if memory is not None else None
    judge_node = (runner_settings.get("eval") or {}).get("judge")
    judge = instantiate(judge_node) if judge_node and not options.retrieval_only else None
    runner, own_executor = None, None
    if executor is None and (workers > 1 or ray is not None):
        from memlab.eval.workers import make_executor

        executor = own_executor = make_executor(workers, ray)
    if executor is not None:
        from memlab.eval.workers import ParallelRunner

        runner = ParallelRunner(executor, pipeline, split_runner_keys(tree)[0], judge, judge_node, options, folder,
                                save_to, load_from)
    try:
        with atomic_folder(folder) as staging:
            log.info("writing the run into %s; it replaces %s when the run ends", staging, folder)
            (staging / "config.yaml").write_text(dump_config(tree), encoding="utf-8")
            metrics = run_benchmark(pipeline, selected, staging, options, judge=judge, save_to=save_to,
                                    load_from=load_from, runner=runner, on_progress=on_progress, run_info={
                "pipeline": Path(config).stem,
                "config": str(config),
                "overrides": overrides,
                "data": str(data) if data else "embedded sample",
                "conversations": [c.id for c in selected],
                "sessions": sessions,
                "categories": list(options.categories) if options.categories else None,
                "max_questions": options.max_questions,
                "sample_questions": options.sample_questions,
                "sample_seed": options.sample_seed if options.sample_questions is not None else None,
                "memory_from": str(memory) if memory is not None else None,
                "errata": applied,
                "workers": executor.slots if executor is not None else 1,
                "machine": machine_info(run_lms(pipeline, judge)),
                "ray": ray,
            })
            if runner is not None:  # what merging the workers' response caches did
                metrics["cache_merge"] = runner.cache_merge
                write_json_atomic(staging / "metrics.json", metrics)
    finally:
        if own_executor is not None:
            own_executor.shutdown()
        close_lms(pipeline, judge)
    return folder, metrics


def select_conversations(data: str | os.PathLike | None, conversations: Sequence[str] | None, sessions: int | None,
                         errata: str | os.PathLike | None, categories: Sequence[str] | None):
    """The conversations a run answers (``run_config``'s arguments) and what the errata file
    changed (None without one); unknown categories raise ``ValueError``."""
    from memlab.data import load_conversations
    from memlab.data.prefix import first_sessions

    selected, applied = load_conversations(data, conversations), None
    if errata is not None:  # on whole conversations: the audited evidence may name later sessions' turns
        selected, applied = apply_errata(selected, load_errata(errata), errata)
        # One line either way: an errata file for other conversations must not pass unnoticed.
        (log.info if applied["applied"] else log.warning)(
            "%s: %d of %d corrections applied (%d answers and %d evidence lists changed), %d for conversations "
            "not loaded", errata, applied["applied"], applied["entries"], applied["answers_changed"],
            applied["evidence_changed"], applied["not_loaded"])
    if sessions is not None:
        selected = [first_sessions(c, sessions) for c in selected]
    check_categories(selected, categories, data or "the embedded sample")
    return selected, applied


#: What a run writes into its folder; ``run_config`` replaces a folder holding only these.
RUN_FILES = frozenset({"config.yaml", "metrics.json", "predictions.jsonl", "predictions.jsonl.partial",
                       "builds.jsonl.partial", "building.json.partial"})


def check_run_folder(folder: Path) -> None:
    """Refuse an ``out`` that is not a folder a run may replace: a file, a folder holding
    anything but a previous run's files, or a place that cannot be written."""
    problem = replaceable_folder_problem(folder, RUN_FILES, "a memlab run")
    if problem:
        raise ValueError(f"--out {problem}")


def check_categories(conversations: Sequence[Conversation], categories: Sequence[str] | None, source) -> None:
    """Every name in ``categories`` must be a category of the data: a typo must not run an empty
    (or quietly smaller) set."""
    if categories is None:
        return
    known = sorted({q.category for c in conversations for q in c.questions})
    unknown = [name for name in categories if name not in known]
    if unknown:
        raise ValueError(f"categories {unknown} are not in {source} (its categories: {known})")


def in_process(pipeline: Pipeline, options: RunOptions, count_tokens, judge=None,
               save_to: SavedMemories | None = None, load_from: SavedMemories | None = None):
    """The sequential runner: one conversation after another in this process. Takes
    ``(conversations, on_rows, on_built, on_building)`` and yields their ``ConversationResult``s in order."""

    def run(conversations: Sequence[Conversation], on_rows, on_built=None, on_building=None):
        for conversation in conversations:
            save = (lambda memory, c=conversation: save_to.save(pipeline, c, memory)) if save_to is not None else None
            yield run_conversation(pipeline, conversation, options, count_tokens, judge, save, load_from, on_rows,
                                   on_built, on_building)

    return run


def run_benchmark(
    pipeline: Pipeline,
    conversations: list[Conversation],
    out_dir: str | os.PathLike,
    options: RunOptions = RunOptions(),
    judge=None,
    run_info: dict[str, Any] | None = None,
    save_to: SavedMemories | None = None,
    load_from: SavedMemories | None = None,
    runner=None,
    on_progress=None,
) -> dict[str, Any]:
    """Run ``pipeline`` on every conversation and write predictions and metrics; returns metrics.
    ``save_to`` / ``load_from``: saved memories to write / to answer from (module docstring).
    ``runner``: what runs the conversations (default ``in_process``; ``memlab.eval.workers``
    runs them in worker processes): ``runner(conversations, on_rows, on_built, on_building)`` yields
    one ``ConversationResult`` per conversation, in their order. ``on_progress(out_dir)`` is called
    after each write to the progress files (``builds.jsonl.partial``, ``building.json.partial``,
    ``predictions.jsonl.partial``)."""
    from memlab.embed import default_token_counter

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    count_tokens = default_token_counter()
    pipeline.eval()
    if runner is None:
        runner = in_process(pipeline, options, count_tokens, judge, save_to, load_from)
    answered = [c for c in conversations if select_questions(c, options)]
    results: list[ConversationResult] = []
    partial = out / "predictions.jsonl.partial"
    bar = tqdm(total=sum(len(select_questions(c, options)) for c in answered), disable=not options.progress,
               desc="questions", unit="q")
    shown = {"rows": 0}
    written = {"rows": 0}  # rows of the conversation in front already in the file

    def write(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            sink.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        sink.flush()
        if rows and on_progress is not None:
            on_progress(out)

    def on_rows(rows: list[dict[str, Any]]) -> None:
        bar.update(len(rows))
        shown["rows"] += len(rows)
        # Rows of the conversation in front are written as they come, so a run of one long
        # conversation shows its answers on disk; any other's wait for its result (file order).
        front = answered[len(results)].id if len(results) < len(answered) else None
        if rows and all(row.get("conversation_id") == front for row in rows):
            write(rows)
            written["rows"] += len(rows)

    builds = out / "builds.jsonl.partial"
    building = out / "building.json.partial"

    def on_building(record: dict[str, Any]) -> None:
        write_json_atomic(building, record)
        if on_progress is not None:
            on_progress(out)

    def on_built(record: dict[str, Any]) -> None:
        building.unlink(missing_ok=True)
        with builds.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        if on_progress is not None:
            on_progress(out)

    with partial.open("w") as sink:
        for result in runner(answered, on_rows, on_built, on_building):
            if result.conversation_id != answered[len(results)].id:
                raise RuntimeError(f"the runner gave {result.conversation_id} in the place of {answered[len(results)].id}")
            write(result.rows[written["rows"]:])  # the conversations' order, whatever the runner
            written["rows"] = 0
            building.unlink(missing_ok=True)  # a build that failed left its last report
            results.append(result)
            if result.stopped:
                break
            done = sum(len(select_questions(c, options)) for c in answered[:len(results)])
            bar.update(done - shown["rows"])  # a failed build's questions count as done
            shown["rows"] = done
    bar.close()
    os.replace(partial, out / "predictions.jsonl")
    builds.unlink(missing_ok=True)
    building.unlink(missing_ok=True)
    metrics = summarise_results(pipeline, results, options, judge, run_info, conversations)
    write_json_atomic(out / "metrics.json", metrics)
    stopped = metrics.get("stopped")
    if stopped:
        log.error("run stopped early: %s (results so far are in %s)", stopped, out)
    return metrics


def summarise_results(pipeline: Pipeline, results: Sequence[ConversationResult], options: RunOptions, judge,
                      run_info: dict[str, Any] | None, conversations: Sequence[Conversation]) -> dict[str, Any]:
    """``metrics.json`` of a run from its conversations' results (``memlab.eval.report.summarise``)."""
    from memlab.eval.report import summarise

    rows = [row for result in results for row in result.rows]
    build_usage: dict[str, float] = {}
    stage_usage: dict[str, dict[str, float]] = {}
    failures: dict[str, int] = {}
    for result in results:
        _accumulate(build_usage, result.build_usage)
        for name, usage in result.stage_usage.items():
            _accumulate(stage_usage.setdefault(name, {}), usage)
        _accumulate(failures, result.failures)
    build_seconds = sum(result.build_seconds for result in results)
    stopped = next((result.stopped for result in results if result.stopped), None)
    return summarise(
        rows,
        retrieval_only=options.retrieval_only,
        build_seconds=build_seconds + cached_call_seconds(build_usage),
        build_wall_seconds=build_seconds,
        stage_usage=stage_usage,
        build_usage=build_usage,
        judge_info=judge.judge_info() if judge is not None else None,
        extra={
            **(run_info or {}),
            "failures": failures,
            "build_errors": {r.conversation_id: r.build_error for r in results if r.build_error},
            "memory_save_errors": {r.conversation_id: r.save_error for r in results if r.save_error},
            "memory": {r.conversation_id: r.memory_stats for r in results if r.memory_stats is not None},
            "search": pipeline.search_statistics([row["trace"] for row in rows if row.get("trace")]),
            "stopped": stopped,
            "training_overlap": training_overlap(pipeline, conversations),
        },
    )


def _accumulate(total: dict[str, float], delta: dict[str, float]) -> None:
    for key, value in delta.items():
        total[key] = total.get(key, 0) + value
