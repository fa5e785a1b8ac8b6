"""One conversation of a benchmark run: build (or load) its memory, answer its questions, score them.

``run_conversation`` is what a run does per conversation, in the run's own process
(``memlab.eval.runner``) or in a worker (``memlab.eval.workers``); it returns a
``ConversationResult``, plain data that the run sums into ``metrics.json``. The pipeline builds
from ``Conversation.history()`` and is handed ``Question.as_query()``: the sessions, the question
text and date under opaque ids, nothing gold. Questions go to ``Pipeline.answer_many``
(``retrieve_many``) in batches of ``RunOptions.batch_size``; a batch's latency and LLM usage are
split evenly over its questions (batch size 1, the default, measures each question on its own). A
batch that raises is answered again question by question, so a question whose answering raises is
recorded with its error and the run goes on; a model that is unavailable (server down after
retries) stops the conversation, keeping what was done (``ConversationResult.stopped``).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from memlab.clock import active_seconds
from memlab.errors import MemlabError
from memlab.eval import metrics as M
from memlab.eval.abstention import ABSTENTION_GOLD, abstains
from memlab.eval.saved_memories import SavedMemories
from memlab.eval.temporal_match import temporal_correct
from memlab.lm.base import LM
from memlab.lm.errors import LMUnavailableError
from memlab.pipelines.base import Pipeline
from memlab.telemetry import Usage
from memlab.types import Answer, Conversation, Question, Retrieved

log = logging.getLogger(__name__)

RECALL_KS = (1, 5, 10, 20)
RECALL_TOKEN_BUDGETS = (500, 1000, 2000)


@dataclass(frozen=True)
class RunOptions:
    retrieval_only: bool = False
    max_questions: int | None = None
    #: A seeded sample of N questions per conversation, each category (after ``categories``) keeping its
    #: share of them: a smaller row whose mix is the full set's, where ``max_questions`` takes the first N.
    sample_questions: int | None = None
    sample_seed: int = 0
    categories: tuple[str, ...] | None = None
    progress: bool = True
    #: Questions handed to the pipeline at once (``answer_many``); 1 times each question alone.
    batch_size: int = 1
    #: Run a trained stage on conversations its checkpoint learnt from (refused otherwise).
    allow_training_overlap: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_questions is not None and self.max_questions < 1:
            raise ValueError(f"max_questions must be >= 1, got {self.max_questions}")
        if self.sample_questions is not None and self.sample_questions < 1:
            raise ValueError(f"sample_questions must be >= 1, got {self.sample_questions}")
        if self.sample_questions is not None and self.max_questions is not None:
            raise ValueError("max_questions and sample_questions both choose the questions: give one")
        if self.categories is not None and not self.categories:
            raise ValueError("categories is empty: name at least one, or leave it out for all")



def log_failure(error: BaseException, message: str, *args: Any) -> None:
    """Log a failure the run survives: a ``MemlabError`` (a saved memory that fails its checks, a
    stage's own error) names its problem in one line; anything else is a bug and keeps its traceback."""
    if isinstance(error, MemlabError):
        log.error(message + ": %s: %s", *args, type(error).__name__, error)
    else:
        log.exception(message, *args)


def select_questions(conversation: Conversation, options: RunOptions) -> list[Question]:
    questions = [q for q in conversation.questions if options.categories is None or q.category in options.categories]
    if options.sample_questions is not None:
        return stratified_sample(questions, options.sample_questions, f"{options.sample_seed}:{conversation.id}")
    return questions[: options.max_questions] if options.max_questions is not None else questions


def stratified_sample(questions: list[Question], n: int, seed: str) -> list[Question]:
    """``n`` of ``questions`` (all when there are no more), each category's quota its share of ``n``
    rounded by largest remainder, drawn by a generator seeded per category, kept in their order. The
    draw depends on the seed, the ids and the categories only, so two configs sample the same
    questions. Category is the harness's choice of questions, as with ``--categories``: the pipeline
    never sees it."""
    if n >= len(questions):
        return list(questions)
    by_category: dict[str, list[Question]] = {}
    for q in questions:
        by_category.setdefault(q.category, []).append(q)
    exact = {c: n * len(qs) / len(questions) for c, qs in by_category.items()}
    quota = {c: int(share) for c, share in exact.items()}
    # largest remainders first; ties by category name, so the quota never depends on dict order
    for c in sorted(exact, key=lambda c: (quota[c] - exact[c], c))[: n - sum(quota.values())]:
        quota[c] += 1
    chosen: set[str] = set()
    for c, qs in by_category.items():
        chosen.update(q.id for q in random.Random(f"{seed}:{c}").sample(qs, quota[c]))
    return [q for q in questions if q.id in chosen]


def cached_call_seconds(usage: dict[str, float]) -> float:
    """The time the cache saved a phase: its cached calls' model time when they were made."""
    return usage.get("llm_seconds", 0.0) - usage.get("latency_s", 0.0)


def score_retrieval(ranking: list[Retrieved], gold: tuple[str, ...], count_tokens) -> dict[str, float | None]:
    sources = [r.unit.source_ids for r in ranking]
    scores: dict[str, float | None] = {f"recall@{k}": M.recall_at_k(sources, gold, k) for k in RECALL_KS}
    units = [(r.unit.text, r.unit.source_ids) for r in ranking]
    for budget in RECALL_TOKEN_BUDGETS:
        scores[f"recall@tok{budget}"] = M.recall_at_tokens(units, gold, budget, count_tokens)
    return scores


def context_recall(ranking: list[Retrieved], answer: Answer, gold: tuple[str, ...]) -> float | None:
    """Evidence recall of the units the answerer read (None when the pipeline does not say which)."""
    if answer.shown is None:
        return None
    shown = [r.unit.source_ids for r in ranking[: answer.shown]]
    return M.recall_at_k(shown, gold, max(1, answer.shown))  # nothing shown: recall 0


def score_answer(prediction: str, question: Question) -> dict[str, float | None]:
    return {
        "f1_locomo": M.locomo_f1(prediction, question.answer, question.category),
        "f1_amem": M.amem_f1(prediction, question.answer),
        "bleu1": M.bleu1(prediction, question.answer),
        "abstained": float(abstains(prediction)),
        # LoCoMo's temporal questions whose gold is a date phrase (None elsewhere: not measured).
        "temporal_date": temporal_correct(prediction, question.answer) if question.category == "temporal" else None,
    }


@dataclass
class ConversationResult:
    """What running one conversation gave: its rows, and its share of the run's accounting
    (summed over conversations into ``metrics.json``). Plain data, so a worker process can
    hand it back (``memlab.eval.workers``)."""

    conversation_id: str
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    build_seconds: float = 0.0
    build_usage: dict[str, float] = dataclasses.field(default_factory=dict)
    build_error: str | None = None
    save_error: str | None = None
    memory_stats: dict[str, Any] | None = None
    #: Why the run must stop after this conversation (a model that is unavailable), or None.
    stopped: str | None = None
    #: Unusable LLM outputs during this conversation, per stage (pipeline and judge).
    failures: dict[str, int] = dataclasses.field(default_factory=dict)
    #: LLM use of each prompted stage during this conversation (``Pipeline.stage_usage``).
    stage_usage: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)


def run_conversation(
    pipeline: Pipeline,
    conversation: Conversation,
    options: RunOptions,
    count_tokens,
    judge=None,
    save=None,
    load_from: SavedMemories | None = None,
    on_rows=None,
    on_built=None,
    on_building=None,
) -> ConversationResult:
    """Build (or load) ``conversation``'s memory, answer its selected questions, release the
    memory and ``save(memory)`` if given. ``on_rows(rows)`` sees each batch's rows as they come,
    ``on_building(record)`` what the build has cost so far, every ``BUILDING_EVERY_S`` while it runs
    (a ``build_record`` without memory statistics), and ``on_built(record)`` the build's
    ``build_record`` the moment it ends (the run's progress)."""
    result = ConversationResult(conversation.id)
    questions = select_questions(conversation, options)
    before, t0 = _run_usage(pipeline, judge), active_seconds()
    watch = _BuildWatch(conversation.id, pipeline, judge, before, t0, on_building) \
        if on_building and not load_from else None
    try:
        memory = load_from.load(pipeline, conversation) if load_from else pipeline.build(conversation.history())
    except LMUnavailableError as e:
        result.stopped = f"building {conversation.id}: {e}"
        memory = None
    except Exception as e:  # one broken conversation must not end the run
        log_failure(e, "building memory for %s failed", conversation.id)
        result.build_error = f"{type(e).__name__}: {e}"
        memory = None
    finally:
        if watch is not None:
            watch.stop()
        result.build_seconds = active_seconds() - t0
        result.build_usage = dict(pipeline.llm_usage().since(before.pipeline).total)
    if memory is not None:
        at_build = pipeline.memory_stats(memory)
        if on_built is not None:
            on_built(build_record(result, at_build))
        try:
            for start in range(0, len(questions), options.batch_size):
                batch = questions[start:start + options.batch_size]
                try:
                    batch_rows = _answer_batch(pipeline, memory, batch, options, count_tokens, judge)
                except LMUnavailableError as e:
                    result.stopped = f"answering {', '.join(q.id for q in batch)}: {e}"
                    break
                result.rows.extend(batch_rows)
                if on_rows is not None:
                    on_rows(batch_rows)
        finally:
            pipeline.release(memory)
            if save is not None:
                try:
                    save(memory)
                except Exception as e:  # the answers stand; the run still ends non-zero
                    log_failure(e, "saving the memory of %s failed", conversation.id)
                    result.save_error = f"{type(e).__name__}: {e}"
        # A memory still consolidating while questions ran ends different from how it began.
        final = pipeline.memory_stats(memory)
        result.memory_stats = final if final == at_build else {**final, "before_answering": at_build}
    during = _run_usage(pipeline, judge).since(before)
    result.failures = during.failures
    result.stage_usage = dict(during.pipeline.stages)
    return result


def build_record(result: ConversationResult, memory_stats: dict[str, Any] | None) -> dict[str, Any]:
    """What a finished build cost and formed, as one JSON line of a run's progress
    (``builds.jsonl.partial``; the finished run's ``metrics.json`` sums them)."""
    return {"conversation_id": result.conversation_id, "build_seconds": result.build_seconds,
            "build_usage": result.build_usage, "memory_stats": memory_stats}


#: How often a build in progress reports what it has cost so far (``on_building``).
BUILDING_EVERY_S = 60.0


class _BuildWatch:
    """Reports a running build's cost so far from a background thread, every ``BUILDING_EVERY_S``:
    a build of hours (a peer library's, a published graph construction) then shows in the run's
    progress before it ends, with its failed calls by stage and how far it got where the pipeline
    says (``Pipeline.build_reached``). A report that fails is logged; the build goes on."""

    def __init__(self, conversation_id: str, pipeline: Pipeline, judge, before: "_RunUsage", t0: float,
                 report) -> None:
        def record() -> dict[str, Any]:
            so_far = _run_usage(pipeline, judge).since(before)
            return {"conversation_id": conversation_id, "build_seconds": active_seconds() - t0,
                    "build_usage": dict(so_far.pipeline.total), "memory_stats": None,
                    "failures": so_far.failures, "reached": pipeline.build_reached()}

        self._record = record
        self._report = report
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memlab-build-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(BUILDING_EVERY_S):
            try:
                self._report(self._record())
            except Exception as e:  # progress is a courtesy: it must never stop the build
                log.error("the build's progress could not be reported (%s: %s)", type(e).__name__, e)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


@dataclass(frozen=True)
class _RunUsage:
    """The pipeline's LLM use and the judge's at one moment; failed calls are counted over both."""

    pipeline: Usage
    judge: Usage

    @property
    def failures(self) -> dict[str, int]:
        return dict(Counter(self.pipeline.failure_counts()) + Counter(self.judge.failure_counts()))

    def since(self, before: "_RunUsage") -> "_RunUsage":
        return _RunUsage(self.pipeline.since(before.pipeline), self.judge.since(before.judge))


def _run_usage(pipeline: Pipeline, judge) -> _RunUsage:
    return _RunUsage(pipeline.llm_usage(), judge.llm_usage() if judge is not None else Usage())


def _answer_batch(pipeline, memory, questions, options, count_tokens, judge) -> list[dict[str, Any]]:
    """One row per question of ``questions``, answered (or retrieved for) in one pipeline call."""
    queries = [question.as_query() for question in questions]
    before, t0 = pipeline.llm_usage(), active_seconds()
    try:
        if options.retrieval_only:
            results: list[tuple[list[Retrieved], Answer | None, str | None]] = [
                (ranking, None, None) for ranking in pipeline.retrieve_many(memory, queries)]
        else:
            results = [(answer.retrieved, answer, answer.error) for answer in pipeline.answer_many(memory, queries)]
    except LMUnavailableError:
        raise
    except Exception as e:  # recorded on the row; the run goes on
        if len(questions) > 1:  # the others must not pay for one question's failure
            return [row for q in questions
                    for row in _answer_batch(pipeline, memory, [q], options, count_tokens, judge)]
        log_failure(e, "question %s failed", questions[0].id)
        results = [([], None, f"{type(e).__name__}: {e}")]
    if len(results) != len(questions):
        raise RuntimeError(f"{type(pipeline).__name__} gave {len(results)} results for {len(questions)} questions")
    latency = (active_seconds() - t0) / len(questions)
    usage_diff = dict(pipeline.llm_usage().since(before).total)
    if len(questions) > 1:
        usage_diff = {k: v / len(questions) for k, v in usage_diff.items()}
    return [_row(question, ranking, answer, error, latency, usage_diff, count_tokens, judge)
            for question, (ranking, answer, error) in zip(questions, results)]


def _row(question, ranking, answer, error, latency, usage_diff, count_tokens, judge) -> dict[str, Any]:
    row: dict[str, Any] = {
        "conversation_id": question.conversation_id,
        "question_id": question.id,
        "category": question.category,
        "question": question.text,
        "gold": question.answer,
        "prediction": answer.text if answer is not None else None,
        "evidence": list(question.evidence),
        "retrieved": [list(r.unit.source_ids) for r in ranking],
        "retrieved_units": [r.unit.id for r in ranking],
        "context_tokens": None if answer is None else count_tokens(answer.context) if answer.context else 0,
        "usage": usage_diff,
        "latency_s": latency,
        "cold_latency_s": latency + cached_call_seconds(usage_diff),
        "error": error,
        "trace": answer.trace.steps if answer is not None else None,  # the pipeline's steps, for error analysis
    }
    row.update(score_retrieval(ranking, question.evidence, count_tokens))
    if answer is not None:
        row["recall@context"] = context_recall(ranking, answer, question.evidence)
        row.update(score_answer(answer.text, question))
        row["judge"] = _judged(judge, question, question.answer, answer.text, row)
    if question.audited is not None:  # the audit's gold, scored the same way (metrics.json "audited")
        gold = question.audited
        row["audited"] = {"error_type": gold.error_type, "gold": gold.answer, "evidence": list(gold.evidence),
                          **score_retrieval(ranking, gold.evidence, count_tokens)}
        if answer is not None:
            row["audited"]["recall@context"] = context_recall(ranking, answer, gold.evidence)
            row["audited"].update(score_answer(answer.text, dataclasses.replace(question, answer=gold.answer)))
            same = gold.answer == question.answer
            row["audited"]["judge"] = row["judge"] if same else _judged(judge, question, gold.answer, answer.text, row)
    return row


def judge_verdict(judge, category: str, question: str, gold: str, prediction: str) -> float | None:
    """The value a run records for ``judge``'s verdict on one answer (``Judge.metric``)."""
    # An adversarial question's gold is a planted wrong answer; what it tests is abstaining.
    if category == "adversarial":
        gold = ABSTENTION_GOLD
    return judge.metric(judge.run_one(judge.In(question, gold, prediction)))


def _judged(judge, question: Question, gold: str, prediction: str, row: dict[str, Any]) -> float | None:
    """The judge's verdict on ``prediction`` against ``gold`` (None without a judge, or when
    judging raised: then the row's error says why)."""
    if judge is None:
        return None
    try:
        return judge_verdict(judge, question.category, question.text, gold, prediction)
    except LMUnavailableError:
        raise
    except Exception as e:  # a judge that breaks costs this question's verdict, not the run
        log_failure(e, "judging %s failed", question.id)
        row["error"] = row["error"] or f"judge: {type(e).__name__}: {e}"
        return None


def run_lms(pipeline: Pipeline | None, judge=None) -> list[LM]:
    """The LMs a run uses: the pipeline's (if any) and the judge's."""
    return (pipeline.lms() if pipeline is not None else []) + (judge.lms() if judge is not None else [])


def close_lms(pipeline: Pipeline | None, judge=None) -> None:
    """Free the run's models now (``LM.close``)."""
    for lm in run_lms(pipeline, judge):
        lm.close()
