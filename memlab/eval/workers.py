"""Conversations run in worker processes, on this machine or on a Ray cluster (``memlab run --workers N``).

A run's conversations (LongMemEval: its haystacks) are independent: each is one task,
``ConversationTask``, that a worker runs with ``memlab.eval.runner.run_conversation``. The
worker builds the pipeline (and judge) from their config nodes once per process and keeps it
for the next task. What comes back is the ``ConversationResult`` and the response-cache rows
the task wrote; the run (``run_benchmark``) writes the rows in the conversations' order, so the
run folder is the sequential run's: the same predictions, rankings and metrics, usage and
latency aside (a call one run made, the other may replay).

Response caches. A worker reads the run's caches but writes beside them
(``memlab.lm.aside_cache``): one file per task and cache in the work folder. When a task's
result arrives the run merges its rows into the run's cache (``ResponseCache.merge_rows``: one
writer, a stored row never replaced, differing ones counted in ``metrics.json``'s
``cache_merge``) and records the result in the work folder.

The work folder, ``.<out>.work`` beside the run folder, makes a killed run resumable: a rerun
of the same run (same pipeline and judge configs, options, conversations and memory folders:
``run.json``) takes finished conversations from their recorded results and gives unfinished
ones the cache files they wrote, so nothing answered is asked again. It is removed when a run
ends without stopping early. Another run into the same ``--out`` first merges what the old
work folder's caches hold, then starts afresh.

Executors (``memlab.eval.executors``). ``LocalExecutor`` is a process pool (spawned processes: a forked
llama.cpp or torch is not safe); ``memlab.eval.ray_executor.RayExecutor`` sends the same tasks to
a Ray cluster. A run submits its tasks in the conversations' order as slots free up; one executor
can serve several runs at once (``memlab compare --workers N``: configs x conversations).
Each local worker gets ``cpu_count // workers`` torch threads (at least one), so N workers do
not oversubscribe the cores; a local llama.cpp model in each worker still competes for them:
workers pay off against a served model (``OpenAICompatLM``), not a local one on a small machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import shutil
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlab.eval.conversation import ConversationResult, RunOptions, build_record, close_lms, run_conversation, run_lms
from memlab.eval.executors import Executor, LocalExecutor
from memlab.eval.saved_memories import SavedMemories, history_digest
from memlab.fileio import write_json_atomic
from memlab.types import Conversation

log = logging.getLogger(__name__)

WORK_FORMAT = "memlab.run-work"


@dataclass(frozen=True)
class ConversationTask:
    """One conversation of a run, with everything a worker needs to run it (plain data)."""

    pipeline_node: dict[str, Any]
    judge_node: dict[str, Any] | None
    conversation: Conversation
    options: RunOptions
    #: Per cache an LM of the pipeline or judge names (its ``cache_path``), the file this task writes.
    aside_caches: dict[str, str]
    #: The folder of saved memories and this conversation's sub-folder in it, to save the memory into.
    save_into: tuple[str, str] | None = None
    #: The folder of saved memories to answer from (checked by the run before any task starts).
    load_from: str | None = None


@dataclass
class TaskOutcome:
    result: ConversationResult
    #: Per cache (``cache_path`` as configured), the rows this task wrote into its aside file.
    cache_rows: dict[str, list[dict[str, Any]]]


_built: dict[str, Any] = {}  # per worker process: the pipeline and judge of the last config node


def _pipeline_and_judge(task: ConversationTask):
    from memlab.config import instantiate

    key = json.dumps([task.pipeline_node, task.judge_node], sort_keys=True, default=str)
    if key not in _built:
        for pipeline, judge in _built.values():  # one configuration at a time per worker: models are large
            close_lms(pipeline, judge)
        _built.clear()
        pipeline = instantiate(task.pipeline_node)
        pipeline.eval()
        judge = instantiate(task.judge_node) if task.judge_node and not task.options.retrieval_only else None
        _built[key] = (pipeline, judge)
    return _built[key]


def run_task(task: ConversationTask) -> TaskOutcome:
    """Run one conversation in this (worker) process; module docstring."""
    from memlab.embed import default_token_counter
    from memlab.lm.aside_cache import AsideCache
    from memlab.lm.cache import ResponseCache

    pipeline, judge = _pipeline_and_judge(task)
    asides: dict[str, AsideCache] = {}
    for lm in run_lms(pipeline, judge):
        if lm.cache_path is None:
            continue
        if lm.cache_path not in asides:
            shared = ResponseCache.open(lm.cache_path)
            asides[lm.cache_path] = AsideCache(ResponseCache.open(task.aside_caches[lm.cache_path]), shared)
        lm.use_cache(asides[lm.cache_path])
    save = None
    if task.save_into is not None:
        folder, name = task.save_into
        save = lambda memory: pipeline.save_memory(memory, Path(folder) / name)  # noqa: E731 - recorded by the run
    load_from = SavedMemories.open(task.load_from) if task.load_from is not None else None
    try:
        result = run_conversation(pipeline, task.conversation, task.options, default_token_counter(), judge,
                                  save, load_from)
        rows = {path: list(aside.rows()) for path, aside in asides.items()}
    finally:
        for aside in asides.values():
            aside.own.close()
    return TaskOutcome(result, rows)


def make_executor(workers: int, ray: str | None = None) -> Executor:
    """``workers`` local processes, or ``workers`` tasks at a time on the Ray cluster ``ray``."""
    if ray is not None:
        from memlab.eval.ray_executor import RayExecutor

        return RayExecutor(ray, workers)
    return LocalExecutor(workers)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")[:60] + "-" + hashlib.sha256(
        text.encode("utf-8")).hexdigest()[:8]


def _cache_file(cache_path: str) -> Path:
    from memlab.lm.cache import default_cache_path

    return default_cache_path() if cache_path == "default" else Path(cache_path).expanduser()


class WorkFolder:
    """The resumable state of a parallel run (module docstring)."""

    def __init__(self, folder: Path, fingerprint: str, cache_paths: Sequence[str]) -> None:
        self.folder = folder
        self.cache_paths = list(cache_paths)
        previous = self._read(folder / "run.json")
        if previous is not None and previous.get("fingerprint") != fingerprint:
            log.info("%s holds another run's work: merging its caches, then starting afresh", folder)
            self._merge_leftovers(previous.get("caches") or [])
            shutil.rmtree(folder)
        elif previous is None and folder.exists():
            shutil.rmtree(folder)  # created but never described: nothing in it can be trusted
        (folder / "caches").mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / "run.json", {"format": WORK_FORMAT, "fingerprint": fingerprint,
                                                "caches": self.cache_paths})

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("format") == WORK_FORMAT else None

    def _merge_leftovers(self, cache_paths: Sequence[str]) -> None:
        from memlab.lm.cache import CacheError, ResponseCache

        for index, cache_path in enumerate(cache_paths):
            for aside in sorted((self.folder / "caches").glob(f"*.{index}.sqlite")):
                try:
                    own = ResponseCache.open(aside)
                    ResponseCache.open(_cache_file(cache_path)).merge_rows(own.rows())
                    own.close()
                except CacheError as e:  # a file the kill left broken holds nothing worth keeping
                    log.warning("could not merge %s: %s", aside, e)

    def aside_caches(self, conversation_id: str) -> dict[str, str]:
        return {cache_path: str(self.folder / "caches" / f"{_slug(conversation_id)}.{index}.sqlite")
                for index, cache_path in enumerate(self.cache_paths)}

    def result_file(self, conversation_id: str) -> Path:
        return self.folder / f"{_slug(conversation_id)}.result.json"

    def finished(self, conversation_id: str) -> ConversationResult | None:
        data = self._read(self.result_file(conversation_id))
        if data is None:
            return None
        try:
            result = ConversationResult(**data["result"])
        except TypeError:  # written by another memlab: run the conversation again
            return None
        return result if result.conversation_id == conversation_id and not result.stopped else None

    def record(self, outcome: TaskOutcome, merged: dict[str, int]) -> None:
        """Merge a finished task's cache rows into the run's caches, then record its result."""
        from memlab.lm.cache import ResponseCache

        conversation_id = outcome.result.conversation_id
        for cache_path, rows in outcome.cache_rows.items():
            added, same, other = ResponseCache.open(_cache_file(cache_path)).merge_rows(rows)
            merged["added"] += added
            merged["already_present"] += same
            merged["conflicting"] += other
        if not outcome.result.stopped:
            write_json_atomic(self.result_file(conversation_id),
                              {"format": WORK_FORMAT, "result": dataclasses.asdict(outcome.result)})
            for aside in self.aside_caches(conversation_id).values():
                for suffix in ("", "-wal", "-shm"):
                    Path(aside + suffix).unlink(missing_ok=True)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def work_folder_of(out: Path) -> Path:
    return out.parent / f".{out.name}.work"


def fingerprint(pipeline_node, judge_node, options: RunOptions, conversations: Sequence[Conversation],
                save_to: SavedMemories | None, load_from: SavedMemories | None) -> str:
    """What makes two runs the same run, for resuming (module docstring)."""
    payload = {"pipeline": pipeline_node, "judge": judge_node, "options": dataclasses.asdict(options),
               "conversations": [[c.id, history_digest(c), [dataclasses.asdict(q) for q in c.questions]]
                                 for c in conversations],
               "save": str(save_to.folder) if save_to else None, "load": str(load_from.folder) if load_from else None}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode("utf-8")).hexdigest()


class ParallelRunner:
    """A ``runner`` for ``run_benchmark`` that hands conversations to ``executor`` as tasks
    (module docstring); ``cache_merge`` counts what merging the workers' caches did. A worker's
    build is reported when its task ends (``on_built``), not while it runs (``on_building`` unused)."""

    def __init__(self, executor, pipeline, pipeline_node: dict[str, Any], judge, judge_node: dict[str, Any] | None,
                 options: RunOptions, out: Path, save_to: SavedMemories | None = None,
                 load_from: SavedMemories | None = None) -> None:
        self.executor = executor
        self.pipeline_node = pipeline_node
        self.judge_node = judge_node
        self.options = options
        self.out = Path(out)
        self.save_to = save_to
        self.load_from = load_from
        self.cache_paths = sorted({lm.cache_path for lm in run_lms(pipeline, judge) if lm.cache_path is not None})
        self.cache_merge = {"added": 0, "already_present": 0, "conflicting": 0}

    def __call__(self, conversations: Sequence[Conversation], on_rows, on_built=None, on_building=None):
        work = WorkFolder(work_folder_of(self.out), fingerprint(self.pipeline_node, self.judge_node, self.options,
                                                                conversations, self.save_to, self.load_from),
                          self.cache_paths)
        names = self.save_to.folder_names([c.id for c in conversations]) if self.save_to is not None else {}
        ready: dict[str, ConversationResult] = {}
        waiting: list[ConversationTask] = []
        pending: dict[Future, Conversation] = {}
        if self.save_to is not None:
            self.save_to.folder.mkdir(parents=True, exist_ok=True)
        for conversation in conversations:
            done = work.finished(conversation.id)
            if done is not None and (self.save_to is None or conversation.id in self.save_to.index["memories"]):
                ready[conversation.id] = done
                continue
            waiting.append(ConversationTask(
                self.pipeline_node, self.judge_node, conversation, self.options, work.aside_caches(conversation.id),
                (str(self.save_to.folder), names[conversation.id]) if self.save_to is not None else None,
                str(self.load_from.folder) if self.load_from is not None else None))
        waiting.reverse()  # popped from the end: conversations start in their order
        try:
            for conversation in conversations:  # yielded in order; each task recorded the moment it ends
                while conversation.id not in ready:
                    # Another run may hold the executor's slots (a sweep): then wait for one only
                    # when this run has nothing of its own in flight to record meanwhile.
                    while waiting and (not pending or self.executor.has_free_slot()):
                        task = waiting.pop()
                        pending[self.executor.submit(run_task, task)] = task.conversation
                    if not pending:
                        raise RuntimeError(f"no task runs {conversation.id}")
                    finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                    for future in finished:
                        outcome: TaskOutcome = future.result()
                        done_conversation = pending.pop(future)
                        work.record(outcome, self.cache_merge)
                        if self.save_to is not None and not outcome.result.save_error \
                                and outcome.result.memory_stats is not None:
                            self.save_to.record(done_conversation, names[done_conversation.id])
                        ready[done_conversation.id] = outcome.result
                result = ready.pop(conversation.id)
                if on_built is not None and result.memory_stats is not None:  # known once the task ends
                    on_built(build_record(result, result.memory_stats))
                on_rows(result.rows)
                yield result
                if result.stopped:  # the work folder stays: a rerun resumes
                    return
        finally:
            for future in pending:
                future.cancel()
        work.remove()
