"""A sweep: the rows of one table, each a pipeline config, run on exactly the same questions
(``memlab sweep FILE``). The file (YAML; relative paths are relative to it)::

    questions:                 # the one question set every row answers
      data: ../../../shared/data/locomo/locomo10_dev.json
      conversations: [conv-26, conv-30]
      categories: [multi-hop, temporal, open-domain, single-hop, adversarial]
      sessions: null           # a prefix of each conversation (memlab run --sessions)
      sample: null             # or {questions: N, seed: S} per conversation (--sample-questions)
      max_questions: null      # each conversation's first N (--max-questions)
      errata: ../../../shared/data/locomo/audit/errata_dev.json   # audited gold scored beside the original
    judge: {_component_: memlab.eval.judge.CorrectWrongJudge, lm: {...}}   # or null: set on every row
    primary: judge             # the metric that names the best row (default: judge if any, else f1_amem)
    rows:
      rag_turns:               # the row's name: its run folder is OUT/rag_turns
        label: Turn RAG, published recipe (`rag_turns.yaml`)
        config: ../pipelines/rag_turns.yaml
        overrides: {answerer.lm.n_threads: 2}     # dotted keys and their values (nodes allowed)
        allow_training_overlap: false
        stands_in_for: null    # the row this one is a cheaper variant of (named beside it while unfinished)

A row names a config and its overrides, never its questions: a key that would choose questions
is refused, and so is a finished row folder whose questions differ from the file's.

``run_sweep`` runs every row that is not complete, in the file's order (with ``workers`` > 1 or
``ray``, side by side over one shared pool of workers), each as ``memlab run`` does into
``OUT/<name>``. A row is complete when its folder holds a clean finished run (no failed question
or build, not stopped) of the row's present resolved config over the file's questions; anything
else runs again, and the response cache replays every model call the earlier attempt made, so an
interrupted sweep (Ctrl-C, a killed machine) resumes where it stopped. A row that fails does not
stop the others. Once the rows have run, ``OUT/report/`` holds one ``memlab report`` of the
complete rows, the best row (by ``primary``) first, so each other row carries its paired
difference against it; ``sweep_status`` says which rows are complete at any time.

A row that has not finished is never silently missing: while it runs, ``OUT/unfinished/<name>.json``
records what its attempt has reached and cost so far, after each build and each answered question
(``memlab.eval.progress``; so a sweep stopped any way, even killed, keeps it; removed once the row
is complete), and the group shows those figures. ``only`` (``--rows``) runs a chosen subset of the rows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from memlab.config import COMPONENT, ConfigError, dump_config, load_config, locate_config
from memlab.errors import MemlabError
from memlab.eval.conversation import RunOptions

log = logging.getLogger(__name__)

QUESTION_KEYS = ("data", "conversations", "categories", "sessions", "sample", "max_questions", "errata")
ROW_KEYS = ("label", "config", "overrides", "allow_training_overlap", "stands_in_for")
FILE_KEYS = ("questions", "judge", "primary", "rows")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: Metrics a sweep may rank its rows by (``overall`` of metrics.json).
PRIMARY_METRICS = ("judge", "f1_amem", "f1_locomo", "recall@10")
#: ``OUT/unfinished/<row>.json``: what a row that has not finished reached and cost so far.
UNFINISHED = "unfinished"
REPORT = "report"


class SweepError(MemlabError, ValueError):
    """A sweep file that cannot be run, or a row folder that does not belong to it; names which and why."""


@dataclass(frozen=True)
class QuestionSet:
    """The questions every row answers (``memlab run``'s data options)."""

    data: str | None
    conversations: tuple[str, ...] | None
    categories: tuple[str, ...] | None
    sessions: int | None
    sample: tuple[int, int] | None  # (questions per conversation, seed)
    max_questions: int | None
    errata: str | None

    def options(self, allow_training_overlap: bool = False, progress: bool = False) -> RunOptions:
        return RunOptions(categories=self.categories, max_questions=self.max_questions,
                          sample_questions=self.sample[0] if self.sample else None,
                          sample_seed=self.sample[1] if self.sample else 0, progress=progress,
                          allow_training_overlap=allow_training_overlap)


@dataclass(frozen=True)
class SweepRow:
    name: str
    label: str
    config: Path
    overrides: Mapping[str, Any]
    allow_training_overlap: bool
    #: The row this one is the cheaper variant of, shown beside it while that one cannot finish.
    stands_in_for: str | None = None


@dataclass(frozen=True)
class Sweep:
    path: Path
    questions: QuestionSet
    judge: Mapping[str, Any] | None
    primary: str
    rows: tuple[SweepRow, ...]

    def row_overrides(self, row: SweepRow) -> dict[str, Any]:
        """The row's overrides with the file's judge set on it (the judge is the file's, not the row's)."""
        return {**row.overrides, "eval.judge": self.judge}

    def resolved_config(self, row: SweepRow) -> str:
        """The row's config as its run folder's ``config.yaml`` will hold it."""
        return dump_config(load_config(row.config, self.row_overrides(row)))


@dataclass
class RowStatus:
    """Where one row stands: ``complete``, ``failed`` (finished with failures), ``stale`` (finished
    with another config), ``partial`` (interrupted: ``answered`` of its questions on disk),
    ``not started``."""

    name: str
    state: str
    detail: str = ""
    answered: int | None = None
    metrics: dict[str, Any] | None = field(default=None, repr=False)


def load_sweep(path: str | os.PathLike) -> Sweep:
    """The sweep file ``path``, checked whole (unknown keys, row names, configs and overrides
    validated without building anything); ``SweepError`` naming the file and the problem."""
    try:
        path = locate_config(path)  # a file, or a shipped sweep's name
    except ConfigError as e:
        raise SweepError(str(e)) from None
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepError(f"sweep file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SweepError(f"{path}: cannot read the sweep file ({e})") from None
    except yaml.YAMLError as e:
        raise SweepError(f"{path}: invalid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(tree, dict):
        raise SweepError(f"{path}: a sweep file is a mapping with the keys {list(FILE_KEYS)}")
    _no_unknown_keys(path, "the file", tree, FILE_KEYS)
    questions = _questions(path, tree.get("questions") or {})
    judge = tree.get("judge")
    if judge is not None and not (isinstance(judge, dict) and COMPONENT in judge):
        raise SweepError(f"{path}: judge must be null or a judge component node ({COMPONENT}: ...)")
    primary = tree.get("primary") or ("judge" if judge is not None else "f1_amem")
    if primary not in PRIMARY_METRICS:
        raise SweepError(f"{path}: primary is {primary!r}; it must be one of {list(PRIMARY_METRICS)}")
    if primary == "judge" and judge is None:
        raise SweepError(f"{path}: primary is judge, but the file sets no judge")
    rows_node = tree.get("rows")
    if not isinstance(rows_node, dict) or not rows_node:
        raise SweepError(f"{path}: rows must be a mapping of row names to rows (at least one)")
    rows = tuple(_row(path, name, node) for name, node in rows_node.items())
    for row in rows:
        if row.stands_in_for is not None and row.stands_in_for not in rows_node or row.stands_in_for == row.name:
            raise SweepError(f"{path}: row {row.name!r}: stands_in_for must name another row of the file, got "
                             f"{row.stands_in_for!r}")
    sweep = Sweep(path=path, questions=questions, judge=judge, primary=primary, rows=rows)
    for row in rows:  # every row's config loads and validates now, not hours into the sweep
        try:
            _validate_row(sweep, row)
        except ConfigError as e:
            raise SweepError(f"{path}: row {row.name!r}: {e}") from None
    return sweep


def _no_unknown_keys(path: Path, where: str, node: Mapping[str, Any], allowed: Sequence[str],
                     hint: str = "") -> None:
    unknown = sorted(set(node) - set(allowed))
    if unknown:
        raise SweepError(f"{path}: {where} has no key {unknown[0]!r} (it takes {list(allowed)}){hint}")


def _questions(path: Path, node: Any) -> QuestionSet:
    if not isinstance(node, dict):
        raise SweepError(f"{path}: questions must be a mapping with the keys {list(QUESTION_KEYS)}")
    _no_unknown_keys(path, "questions", node, QUESTION_KEYS)

    def names(key: str) -> tuple[str, ...] | None:
        value = node.get(key)
        if value is None:
            return None
        if not (isinstance(value, list) and value and all(isinstance(v, str) and v for v in value)):
            raise SweepError(f"{path}: questions.{key} must be a non-empty list of names")
        return tuple(value)

    def count(key: str) -> int | None:
        value = node.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise SweepError(f"{path}: questions.{key} must be a whole number >= 1 or null, got {value!r}")
        return value

    sample = node.get("sample")
    if sample is not None:
        if not (isinstance(sample, dict) and set(sample) <= {"questions", "seed"} and "questions" in sample
                and isinstance(sample["questions"], int) and sample["questions"] >= 1
                and isinstance(sample.get("seed", 0), int)):
            raise SweepError(f"{path}: questions.sample must be {{questions: N, seed: S}} with N >= 1")
        sample = (sample["questions"], sample.get("seed", 0))
    if sample is not None and node.get("max_questions") is not None:
        raise SweepError(f"{path}: questions sets sample and max_questions; choose one")
    return QuestionSet(data=_file(path, node.get("data"), "questions.data"), conversations=names("conversations"),
                       categories=names("categories"), sessions=count("sessions"), sample=sample,
                       max_questions=count("max_questions"), errata=_file(path, node.get("errata"), "questions.errata"))


def _file(path: Path, value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise SweepError(f"{path}: {where} must be a path")
    return str((path.parent / value).resolve()) if not Path(value).is_absolute() else value


def _row(path: Path, name: Any, node: Any) -> SweepRow:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SweepError(f"{path}: row name {name!r} must be a folder name (letters, digits, '.', '_', '-')")
    if name in (REPORT, UNFINISHED):
        raise SweepError(f"{path}: row name {name!r} is the sweep's own folder; choose another")
    if not isinstance(node, dict):
        raise SweepError(f"{path}: row {name!r} must be a mapping with the keys {list(ROW_KEYS)}")
    chooses = sorted(set(node) & set(QUESTION_KEYS))
    if chooses:
        raise SweepError(f"{path}: row {name!r} sets {chooses[0]!r}: a row cannot choose its questions, which "
                         "are the file's (questions:) so that every row answers the same ones")
    _no_unknown_keys(path, f"row {name!r}", node, ROW_KEYS)
    config = node.get("config")
    if not isinstance(config, str) or not config.strip():
        raise SweepError(f"{path}: row {name!r} needs config: the path of a pipeline config")
    overrides = node.get("overrides") or {}
    if not isinstance(overrides, dict) or not all(isinstance(k, str) and k.strip() for k in overrides):
        raise SweepError(f"{path}: row {name!r}: overrides must map dotted keys to values")
    if any(key == "eval.judge" or key.startswith("eval.judge.") or key == "eval" for key in overrides):
        raise SweepError(f"{path}: row {name!r} overrides the judge; the judge is the file's (judge:), "
                         "so that every row is scored by the same one")
    allow = node.get("allow_training_overlap", False)
    if not isinstance(allow, bool):
        raise SweepError(f"{path}: row {name!r}: allow_training_overlap must be true or false")
    label = node.get("label", name)
    if not isinstance(label, str) or not label.strip():
        raise SweepError(f"{path}: row {name!r}: label must be a text")
    stands_in_for = node.get("stands_in_for")
    if stands_in_for is not None and not isinstance(stands_in_for, str):
        raise SweepError(f"{path}: row {name!r}: stands_in_for must name another row of the file")
    return SweepRow(name=name, label=label, config=(path.parent / config).resolve(), overrides=dict(overrides),
                    allow_training_overlap=allow, stands_in_for=stands_in_for)


def _validate_row(sweep: Sweep, row: SweepRow) -> None:
    from memlab.config import validate_pipeline_tree

    validate_pipeline_tree(load_config(row.config, sweep.row_overrides(row)), row.config)


def selected_conversations(sweep: Sweep) -> list:
    """The file's conversations as ``memlab run`` selects them (``runner.select_conversations``)."""
    from memlab.eval.runner import select_conversations

    q = sweep.questions
    return select_conversations(q.data, q.conversations, q.sessions, q.errata, q.categories)[0]


def expected_question_ids(sweep: Sweep) -> tuple[str, ...]:
    """The file's questions, in run order, as ``memlab run`` selects them."""
    from memlab.eval.conversation import select_questions

    options = sweep.questions.options()
    return tuple(question.id for c in selected_conversations(sweep) for question in select_questions(c, options))


def _recorded_answers(record: Path) -> int | None:
    """How many answers a progress record keeps; None without a readable one."""
    try:
        return len(json.loads(record.read_text(encoding="utf-8"))["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def row_status(sweep: Sweep, row: SweepRow, out: Path, expected: Sequence[str]) -> RowStatus:
    """Where ``row`` stands in ``out`` (``RowStatus``); ``SweepError`` when its folder holds a
    finished run of this row's config over other questions than the file's."""
    folder = out / row.name
    partial = sorted(out.glob(f".{row.name}.tmp-*/predictions.jsonl.partial"))
    record = out / UNFINISHED / f"{row.name}.json"
    if not (folder / "metrics.json").is_file():
        staged = max((sum(1 for line in p.open(encoding="utf-8") if line.strip()) for p in partial), default=None)
        recorded = _recorded_answers(record)
        # A staging folder is a run going on now or one killed before it cleaned up; the record is
        # what the last stopped run kept. The one further on says where the row stands.
        if staged is not None and (recorded is None or staged >= recorded):
            return RowStatus(row.name, "partial", f"{staged} of {len(expected)} questions on disk", staged)
        if record.is_file():
            try:
                progress = json.loads(record.read_text(encoding="utf-8"))
                answered, building = len(progress["rows"]), progress.get("building")
                reached = ""
                if building:
                    turns = building.get("reached")
                    reached = (f", {building['conversation_id']} part built ({building['llm_calls']:,} LLM calls"
                               + (f", {turns['turns']} of {turns['of']} turns" if turns else "") + ")")
            except (OSError, ValueError, KeyError, TypeError) as e:
                return RowStatus(row.name, "partial", f"its progress record {record} is unreadable "
                                                      f"({type(e).__name__}: {e})")
            return RowStatus(row.name, "partial", f"{answered} of {len(expected)} questions answered{reached} "
                                                  f"when it stopped ({record})", answered)
        return RowStatus(row.name, "not started")
    try:
        metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        config = (folder / "config.yaml").read_text(encoding="utf-8")
        ids = tuple(json.loads(line)["question_id"] for line in
                    (folder / "predictions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip())
    except (OSError, ValueError, KeyError, TypeError) as e:
        return RowStatus(row.name, "stale", f"its folder cannot be read ({type(e).__name__}: {e}); it runs again")
    if config != sweep.resolved_config(row):
        return RowStatus(row.name, "stale", "finished with another config than the file's; it runs again")
    if ids != tuple(expected):
        missing, extra = sorted(set(expected) - set(ids)), sorted(set(ids) - set(expected))
        raise SweepError(f"row {row.name!r} ({folder}) is a finished run over other questions than the sweep's "
                         f"({len(ids)} against {len(expected)}; {len(missing)} missing, e.g. "
                         f"{', '.join(missing[:3]) or '-'}; {len(extra)} extra, e.g. {', '.join(extra[:3]) or '-'}): "
                         "a table holds one question set. Move the folder away to run the row again")
    problems = _failures(metrics)
    if problems:
        return RowStatus(row.name, "failed", f"{problems}; it runs again", metrics=metrics)
    return RowStatus(row.name, "complete", metrics=metrics)


def _failures(metrics: Mapping[str, Any]) -> str:
    parts = []
    if metrics.get("failed_questions"):
        parts.append(f"{metrics['failed_questions']} questions failed")
    if metrics.get("build_errors"):
        parts.append(f"builds failed ({', '.join(sorted(metrics['build_errors']))})")
    if metrics.get("stopped"):
        parts.append(f"stopped early ({metrics['stopped']})")
    return "; ".join(parts)


def sweep_status(sweep: Sweep, out: str | os.PathLike) -> list[RowStatus]:
    """Every row's ``RowStatus`` in ``out``, in the file's order."""
    expected = expected_question_ids(sweep)
    return [row_status(sweep, row, Path(out), expected) for row in sweep.rows]


def run_sweep(sweep: Sweep, out: str | os.PathLike, workers: int = 1, ray: str | None = None,
              progress: bool = False, report: bool = True,
              only: Sequence[str] | None = None) -> list[RowStatus]:
    """Run every row of ``sweep`` that is not complete into ``out`` (module docstring), then
    write ``out/report`` over the complete rows; returns every row's status afterwards. ``only``
    names the rows to run, in the file's order (the report still covers every complete row). Bad
    input (the file's questions, a row folder over other questions, an unknown row name) raises
    before any row runs."""
    from memlab.eval.runner import run_config
    from memlab.fileio import refuse_writing_into

    out = Path(out)
    q = sweep.questions
    refuse_writing_into(out, "--out", {"the sweep file": sweep.path, "its data": q.data, "its errata": q.errata,
                                       **{f"row {row.name}'s config": row.config for row in sweep.rows}})
    expected = expected_question_ids(sweep)
    if not expected:
        raise SweepError(f"{sweep.path}: the file's questions select no question")
    names = [row.name for row in sweep.rows]
    unknown = [name for name in only or () if name not in names]
    if unknown:
        raise SweepError(f"{sweep.path}: no row named {', '.join(unknown)} (its rows: {', '.join(names)})")
    before = [row_status(sweep, row, out, expected) for row in sweep.rows]
    todo = [row for row, status in zip(sweep.rows, before)
            if status.state != "complete" and (only is None or row.name in only)]
    for row, status in zip(sweep.rows, before):
        log.info("row %s: %s%s", row.name, status.state, f" ({status.detail})" if status.detail else "")
    executor = None
    if todo and (workers > 1 or ray is not None):
        from memlab.eval.workers import make_executor

        executor = make_executor(workers, ray)

    per_conversation = questions_per_conversation(sweep)

    def run(row: SweepRow) -> None:
        about = {"row": row.name, "config_sha256": config_digest(sweep.resolved_config(row)),
                 "questions": per_conversation}
        try:
            run_config(row.config, sweep.row_overrides(row), data=q.data, conversations=q.conversations,
                       sessions=q.sessions, options=q.options(row.allow_training_overlap, progress),
                       out=out / row.name, errata=q.errata, executor=executor,
                       on_progress=lambda staging: record_progress(about, staging, out))
        except ValueError as e:  # this row's config or checkpoints: the other rows still run
            log.error("row %s: %s; continuing with the others", row.name, e)

    try:
        if executor is None:
            for row in todo:
                run(row)
        else:  # every row's runner in its own thread, all feeding the one pool of workers
            with ThreadPoolExecutor(max_workers=len(todo)) as threads:
                list(threads.map(run, todo))
    finally:  # interrupted too: what the unfinished rows reached is recorded before the sweep stops
        if executor is not None:
            executor.shutdown()
        after = [row_status(sweep, row, out, expected) for row in sweep.rows]
        forget_finished(sweep, after, out)
        if report:
            write_sweep_report(sweep, after, out)
            write_group(sweep, after, out)
    return after


def config_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def questions_per_conversation(sweep: Sweep) -> dict[str, int]:
    from memlab.eval.conversation import select_questions

    options = sweep.questions.options()
    return {c.id: len(select_questions(c, options)) for c in selected_conversations(sweep)}


def record_progress(about: Mapping[str, Any], staging: Path, out: Path) -> None:
    """Write ``out/unfinished/<row>.json`` from the attempt staged in ``staging``
    (``memlab.eval.progress``): what it reached and cost so far, when, and where (``machine``,
    and ``machines``: every machine its attempts ran on), beside ``about`` the row (its ``row``
    name, ``config_sha256`` and ``questions`` per conversation). A record that cannot be made is
    logged; the run goes on."""
    from memlab.eval.machine import machine_identity
    from memlab.eval.progress import read_progress
    from memlab.fileio import write_json_atomic

    try:
        machine = machine_identity()  # the finished run's metrics.json names it the same way
        path = out / UNFINISHED / f"{about['row']}.json"
        machines = attempt_machines(path, about["config_sha256"])
        record = {**about, "attempt_started": _iso((staging / "config.yaml").stat().st_mtime),
                  "recorded": _iso(time.time()), "machine": machine,
                  "machines": machines if machine in machines else [*machines, machine],
                  **read_progress(staging)}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, record)
    except (OSError, ValueError) as e:
        log.error("row %s: its progress could not be recorded (%s: %s)", about["row"], type(e).__name__, e)


def attempt_machines(record: Path, config_sha256: str | None = None) -> list[dict[str, Any]]:
    """Every machine the earlier attempts of a row ran on, from its progress record (``machines``;
    a record older than that field names only its last, ``machine``); none where there is no
    readable record, or it was made with another config than ``config_sha256``. A row resumed
    on another machine replays those attempts' calls at the seconds that machine recorded, so
    they are named beside its own."""
    try:
        previous = json.loads(record.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(previous, dict) or config_sha256 not in (None, previous.get("config_sha256")):
        return []
    machines = previous.get("machines") or ([previous["machine"]] if previous.get("machine") else [])
    return [m for m in machines if isinstance(m, dict)]


def forget_finished(sweep: Sweep, statuses: Sequence[RowStatus], out: Path) -> None:
    """Remove the progress record of each row that is now complete, once the machines its earlier
    attempts ran on, where they differ from the finishing run's, are kept in its ``metrics.json``
    (``machine.earlier_attempts``): its seconds were measured there too."""
    from memlab.fileio import write_json_atomic

    rows = {row.name: row for row in sweep.rows}
    for status in statuses:
        record = out / UNFINISHED / f"{status.name}.json"
        if status.state != "complete" or not record.exists():
            continue
        digest = config_digest(sweep.resolved_config(rows[status.name]))
        machine = status.metrics.get("machine") or {}
        known = [{"cpu": machine.get("cpu"), "cores": machine.get("cores")}, *machine.get("earlier_attempts", [])]
        earlier = [m for m in attempt_machines(record, digest) if m not in known]
        if earlier:
            metrics = {**status.metrics, "machine": {**machine, "earlier_attempts": known[1:] + earlier}}
            write_json_atomic(out / status.name / "metrics.json", metrics)
        record.unlink()


def load_unfinished(sweep: Sweep, out: Path) -> dict[str, dict[str, Any]]:
    """The committed progress records of the rows that are not complete, by row name; a record
    made with another config than the row's present one is marked ``stale``."""
    found = {}
    for row in sweep.rows:
        path = out / UNFINISHED / f"{row.name}.json"
        if not path.is_file():
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise SweepError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
        record["stale"] = record.get("config_sha256") != config_digest(sweep.resolved_config(row))
        found[row.name] = record
    return found


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def best_row(sweep: Sweep, statuses: Sequence[RowStatus]) -> str | None:
    """The complete row with the highest ``primary`` (the first of equals, in the file's order)."""
    scored = [(s.metrics["overall"].get(sweep.primary), -i, s.name) for i, s in enumerate(statuses)
              if s.state == "complete" and s.metrics["overall"].get(sweep.primary) is not None]
    return max(scored)[2] if scored else None


def write_sweep_report(sweep: Sweep, statuses: Sequence[RowStatus], out: Path) -> Path | None:
    """``out/report`` (``memlab report``) over the complete rows, the best row first; None (and
    nothing written) when no row is complete."""
    from memlab.reporting import write_report

    complete = [s.name for s in statuses if s.state == "complete"]
    if not complete:
        return None
    best = best_row(sweep, statuses)
    ordered = ([best] if best else []) + [name for name in complete if name != best]
    return write_report([out / name for name in ordered], out / REPORT)


def group_markdown(sweep: Sweep, statuses: Sequence[RowStatus], out: Path) -> str | None:
    """The complete rows as one headline group (``memlab.reporting.group``), in the file's order:
    the table, the sentence saying which rows the best row's paired interval separates from it,
    the rows not finished with what they reached and cost (their ``unfinished/`` records), and the
    rows with neither named under it; None when no row is complete."""
    from memlab.reporting import load_runs
    from memlab.reporting.group import distinguishable_sentence, group_table, machines_sentence, unfinished_table

    complete = [s.name for s in statuses if s.state == "complete"]
    if not complete:
        return None
    turns = {c.id: sum(1 for _ in c.turns()) for c in selected_conversations(sweep)}
    runs = load_runs([out / name for name in complete])
    labels = {row.name: row.label for row in sweep.rows}
    best = best_row(sweep, statuses)
    unfinished = {name: record for name, record in load_unfinished(sweep, out).items() if name not in complete}
    missing = [s.name + (f" ({s.state}: {s.detail})" if s.state in ("failed", "stale") else "")
               for s in statuses if s.state != "complete" and s.name not in unfinished]
    reference = next((run for run in runs if run.name == best), None)
    stand_ins = {row.stands_in_for: row.name for row in sweep.rows if row.stands_in_for is not None}
    states = {s.name: s.state for s in statuses}
    for name, record in unfinished.items():
        if name in stand_ins:
            record["stand_in"] = f"{labels[stand_ins[name]]} ({states[stand_ins[name]]})"
    return "\n\n".join(part for part in (
        group_table(runs, labels, best, sweep.primary, turns),
        distinguishable_sentence(runs, labels, best, sweep.primary),
        machines_sentence(runs),
        ("Rows not finished: what each reached and its measured cost so far (cold model seconds; its "
         f"{sweep.primary} is over the questions it answered, a prefix of the set, not comparable with the table "
         "above):\n\n" + unfinished_table(unfinished, labels, reference, sweep.primary)) if unfinished else "",
        f"Rows with no complete run yet: {', '.join(missing)}." if missing else "",
    ) if part)


def write_group(sweep: Sweep, statuses: Sequence[RowStatus], out: Path) -> Path | None:
    """``out/group.md`` (``group_markdown``); None, and nothing written, when no row is complete."""
    from memlab.fileio import atomic_file

    text = group_markdown(sweep, statuses, out)
    if text is None:
        return None
    path = out / "group.md"
    with atomic_file(path) as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")
    return path
