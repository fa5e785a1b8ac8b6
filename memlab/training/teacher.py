"""Teacher labels: what CompassMem's prompted construction produced on a conversation, read
back from the response cache.

``teacher_sessions`` builds the pipeline of a CompassMem config whose construction LMs are
declared cache-only (``configs/pipelines/compassmem_teacher.yaml``: ``CacheOnlyLM`` over the
prompted run's LM) and runs the pipeline's two construction steps, its ``segmenter`` and its
``relate``, session by session, so every request is the one the prompted run sent and its reply
is the one that run got. A session whose calls are not all cached (the prompted build has not
reached it) is skipped and counted, never sent to a model; a pipeline whose construction LMs
could call a model is refused. Gold data is not read: only the conversation's sessions.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memlab.config import ConfigError, build_pipeline
from memlab.lm.cache_only import CacheMissError, live_stages
from memlab.stages.relate import Relation
from memlab.stages.segment import SegmentIn
from memlab.types import Conversation, MemoryUnit, Session

if TYPE_CHECKING:
    from memlab.training.evaluators import StageEvaluator

#: The config whose prompted construction the labels come from, replayed from the response cache.
TEACHER_CONFIG = "configs/pipelines/compassmem_teacher.yaml"


@dataclass(frozen=True)
class TeacherSession:
    conversation_id: str
    session: Session
    #: The prompted segmenter's events, in the order it gave them (extractive ones included).
    events: tuple[MemoryUnit, ...]
    #: Its relations between those events (indices into ``events``).
    relations: tuple[Relation, ...]
    #: A segmenter call of this session failed for good (its turns became extractive events).
    segment_failed: bool
    #: The relation call failed for good (no relations).
    relations_failed: bool
    #: The turn ids of each segmenter call, in order (the prompted segmenter reads a session in
    #: windows; an event never spans two). Empty: the whole session was one call.
    windows: tuple[tuple[str, ...], ...] = ()

    @property
    def failed(self) -> bool:
        return self.segment_failed or self.relations_failed


def call_windows(segmenter: Any, conversation_id: str, session: Session) -> tuple[tuple[str, ...], ...]:
    """The turn ids of each of ``segmenter``'s calls on ``session`` (one window when it has no ``windows``)."""
    windows = getattr(segmenter, "windows", None)
    if windows is None:
        return (tuple(turn.id for turn in session.turns),)
    return tuple(tuple(turn.id for turn in window.turns) for window in windows(SegmentIn(conversation_id, session)))


def teacher_sessions(conversations: Sequence[Conversation], config: str | os.PathLike = TEACHER_CONFIG,
                     overrides: Sequence[str] = (), pipeline: Any = None) -> tuple[list[TeacherSession], Counter]:
    """The cached prompted construction of every session of ``conversations``, and the counts of
    what was skipped (``not_cached``) or had failed calls (``failed``). The CompassMem pipeline
    is built from ``config`` + ``overrides`` unless one is given (``pipeline``); a ConfigError
    when its segmenter's or relation extractor's LM is not a ``CacheOnlyLM``."""
    source = "the teacher pipeline" if pipeline is not None else config
    pipeline = pipeline if pipeline is not None else build_pipeline(config, list(overrides))[0]
    live = live_stages(pipeline, ("segmenter", "relation_extractor"))
    if live:
        raise ConfigError(f"{source}: the teacher's {' and '.join(live)} would call a model; declare their lm a "
                          f"memlab.lm.cache_only.CacheOnlyLM (as {TEACHER_CONFIG} does)")
    found: list[TeacherSession] = []
    counts: Counter = Counter()
    for conversation in conversations:
        history = conversation.history()
        for session in (s for s in history.sessions if s.turns):
            try:
                segmented = pipeline.segmenter([SegmentIn(history.id, session)])[0]
                related = pipeline.relate([(session, segmented.units)])[0]
            except CacheMissError:
                counts["not_cached"] += 1
                continue
            windows = call_windows(pipeline.segmenter, history.id, session)
            teacher = TeacherSession(conversation.id, session, segmented.units, related.relations,
                                     bool(segmented.error), bool(related.error), windows)
            counts["sessions"] += 1
            counts["failed"] += teacher.failed
            counts["segment_failed"] += teacher.segment_failed
            counts["relations_failed"] += teacher.relations_failed
            found.append(teacher)
    return found, counts


@dataclass(frozen=True)
class TeacherLabels:
    """The prompted teacher's replayed construction of each session (failed calls included) and
    the counts of what the replay skipped (``teacher_sessions``)."""

    sessions: tuple[TeacherSession, ...]
    counts: Mapping[str, int]


def teacher_labels(evaluator: StageEvaluator, conversations: Sequence[Conversation]) -> TeacherLabels:
    """The teacher sessions of ``conversations`` that ``evaluator``'s ``teacher`` pipeline replays."""
    found, counts = teacher_sessions(conversations, pipeline=evaluator.pipeline_named("teacher"))
    return TeacherLabels(tuple(found), dict(counts))
