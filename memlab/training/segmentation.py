"""Event-segmentation supervision and scores: boundaries distilled from the prompted segmenter.

Labels (``session_boundaries``): each teacher event claims its source turns; a turn's event is
the first event, in the teacher's order, that claims it (a turn no event claims has none); a
boundary lies before turn t (t >= 1) iff turn t's event differs from turn t-1's. The teacher
is CompassMem's ``PromptedEventSegmenter`` (appendix F.1 "Event Extraction" prompt, the
construction model of ``configs/pipelines/compassmem.yaml``: by default the 1.5B
qwen2.5-coder-1.5b-instruct) as ``memlab.training.teacher.teacher_sessions`` replays it from
the response cache; its extractive events (runs of turns no extracted event claimed, or every
turn of a window whose call failed) count as events: they are that stage's output.

Not every position is a decision of the teacher (``labelled_positions``). It reads a session in
windows of 10 turns, one call each, so a window's edge is always a boundary; a window whose call
failed became fixed 3-turn spans; an unclaimed run is cut into 3-turn spans by rule. A position
is labelled only when turns t-1 and t lie in the same window, that window's reply gave a
grounded event, and one of the two turns belongs to such an event. Training loss and scores use
the labelled positions only (the model still reads the whole session).

The same rule reads the boundaries of any segmenter's units, so ``evaluate_segmenter`` scores
any ``Segmenter`` (trained, fixed-span, prompted) the same way: ``boundary_f1`` over the
labelled positions, micro-averaged over sessions. The LoCoMo annotations (observations, session
summaries) are NOT used by the teacher's labels; ``memlab.training.observation_boundaries``
derives labels from them.

Both kinds of labels meet in ``BoundaryLabels``: positions known to hold no boundary, and gaps
(runs of positions) known to hold exactly one, whose place the labels do not fix. A teacher's
labels are gaps of one position. ``boundary_label_loss`` trains on them and ``label_f1`` scores
against them; on gaps of one position the two are the masked cross-entropy and ``boundary_f1``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import datasets
import torch
import torch.nn.functional as F

from memlab.bounds import PositiveInt
from memlab.clock import active_seconds
from memlab.config import PipelineConfig
from memlab.stages.segment import FixedSpanSegmenter, Segmenter, SegmentIn
from memlab.training.evaluators import StageEvaluator, pipeline_label
from memlab.training.teacher import TeacherLabels, teacher_labels
from memlab.types import Conversation, MemoryUnit, Session

if TYPE_CHECKING:
    from memlab.training.teacher import TeacherSession

#: Where the labels come from, for the dataset card (a recipe names its own teacher config).
TEACHER_SOURCE = ("distillation of CompassMem's prompted segmenter (PromptedEventSegmenter, appendix F.1 "
                  "'Event Extraction' prompt compassmem/event_extract, construction model of "
                  "configs/pipelines/compassmem.yaml: default qwen2.5-coder-1.5b-instruct-q4_k_m), replayed from the "
                  "response cache by memlab.training.teacher.teacher_sessions (no model call)")

SEGMENTATION_FEATURES = datasets.Features(
    {
        "conversation_id": datasets.Value("string"),
        "session_id": datasets.Value("string"),
        "turn_ids": datasets.List(datasets.Value("string")),
        "turns": datasets.List(datasets.Value("string")),
        "boundaries": datasets.List(datasets.Value("int64")),
        "positions": datasets.List(datasets.Value("int64")),
        "events": datasets.Value("int64"),
        "failed": datasets.Value("bool"),
    }
)


# -- labels -------------------------------------------------------------------------------
def turn_events(session: Session, units: Sequence[MemoryUnit]) -> list[int | None]:
    """Per turn of ``session``, the index of the first unit claiming it (None: no unit does)."""
    owner: dict[str, int] = {}
    for n, unit in enumerate(units):
        for turn_id in unit.source_ids:
            owner.setdefault(turn_id, n)
    return [owner.get(turn.id) for turn in session.turns]


def session_boundaries(session: Session, units: Sequence[MemoryUnit]) -> list[int]:
    """The turn indices t >= 1 whose event differs from turn t-1's (module docstring)."""
    events = turn_events(session, units)
    return [t for t in range(1, len(events)) if events[t] != events[t - 1]]


def labelled_positions(teacher: "TeacherSession") -> list[int]:
    """The positions t >= 1 the teacher decided (module docstring): turns t-1 and t in one call's
    window, that call gave a grounded (not extractive) event, and one of the turns is in one."""
    ids = [turn.id for turn in teacher.session.turns]
    extracted = {turn_id for unit in teacher.events if not unit.attributes.get("extractive")
                 for turn_id in unit.source_ids}
    window_of: dict[str, int] = {}
    for n, window in enumerate(teacher.windows or (tuple(ids),)):
        if extracted.intersection(window):
            window_of.update((turn_id, n) for turn_id in window)
    return [t for t in range(1, len(ids))
            if ids[t - 1] in window_of and window_of.get(ids[t]) == window_of[ids[t - 1]]
            and (ids[t - 1] in extracted or ids[t] in extracted)]


def usable_sessions(teachers: Sequence["TeacherSession"]) -> list["TeacherSession"]:
    """``teachers`` with at least one labelled position (a session whose every call failed has none)."""
    return [t for t in teachers if labelled_positions(t)]


def mean_event_length(teachers: Sequence["TeacherSession"]) -> float:
    """Turns per teacher event, events counted as the spans the labels make (a session of n
    turns and b boundaries has b + 1)."""
    sessions = [t for t in teachers if t.session.turns]
    turns = sum(len(t.session.turns) for t in sessions)
    spans = sum(len(session_boundaries(t.session, t.events)) + 1 for t in sessions)
    return turns / spans if spans else 0.0


def segmentation_examples(teachers: Sequence["TeacherSession"], counts: Mapping[str, int] | None = None,
                          source: str = TEACHER_SOURCE) -> datasets.Dataset:
    """One row per teacher session with a labelled position: its turns (as the segmenter encodes
    them), the gold boundaries and the labelled positions (module docstring), its number of
    events and whether a call failed. ``counts``: ``teacher_sessions``' counts, for the sessions
    it skipped as not cached."""
    kept = usable_sessions(teachers)
    rows = [{
        "conversation_id": t.conversation_id, "session_id": t.session.id,
        "turn_ids": [turn.id for turn in t.session.turns], "turns": [turn.render() for turn in t.session.turns],
        "boundaries": session_boundaries(t.session, t.events), "positions": labelled_positions(t),
        "events": len(t.events), "failed": t.segment_failed,
    } for t in kept]
    turns = sum(len(row["turns"]) for row in rows)
    boundaries = sum(len(row["boundaries"]) for row in rows)
    positions = sum(len(row["positions"]) for row in rows)
    labelled = sum(len(set(row["boundaries"]) & set(row["positions"])) for row in rows)
    failed = sum(t.segment_failed for t in teachers)
    not_cached = (counts or {}).get("not_cached", 0)
    card = f"""memlab event-segmentation supervision (memlab.training.segmentation.segmentation_examples).
Source of the labels: {source}.
Rows: one session: its turns rendered as the segmenter reads them ("Speaker: text", image caption included), the
gold boundaries (the turn indices t >= 1 before which an event begins) and the labelled positions. Each teacher event
claims its source turns; a turn's event is the first event (teacher order) claiming it; a boundary lies before turn t
iff its event differs from turn t-1's. A position is labelled when turns t-1 and t lie in the same teacher call's
window, that call gave a grounded event and one of the turns is in one: window edges, failed windows and rule-cut
unclaimed runs are not the teacher's decisions and are masked from loss and scores.
The LoCoMo annotations (observations, session summaries) are NOT used.
Conversations: {sorted({t.conversation_id for t in teachers})}.
Sessions: {len(rows)}; turns: {turns}; boundaries: {boundaries}; labelled positions: {positions} of \
{turns - len(rows)}, {labelled} of them boundaries; spans: {boundaries + len(rows)} \
(mean {turns / max(boundaries + len(rows), 1):.2f} turns per event).
Skipped as not cached (the prompted build had not reached them): {not_cached}. Sessions with a failed segmenter call: \
{failed} (kept, their failed windows masked; {len(teachers) - len(kept)} sessions had no labelled position)."""
    info = datasets.DatasetInfo(description=card, features=SEGMENTATION_FEATURES)
    if not rows:
        return datasets.Dataset.from_dict({name: [] for name in SEGMENTATION_FEATURES},
                                          features=SEGMENTATION_FEATURES, info=info)
    return datasets.Dataset.from_list(rows, features=SEGMENTATION_FEATURES, info=info)


@dataclass(frozen=True)
class BoundaryLabels:
    """What the labels know about one session's boundaries (positions t >= 1, a boundary before
    turn t): ``zeros``, positions holding no boundary; ``gaps``, inclusive position ranges
    ``(first, last)`` each holding exactly one boundary somewhere. Other positions are unknown."""

    zeros: tuple[int, ...] = ()
    gaps: tuple[tuple[int, int], ...] = ()

    @classmethod
    def exact(cls, boundaries: Sequence[int], positions: Sequence[int]) -> "BoundaryLabels":
        """Labels known position by position (a teacher's): at each of ``positions``, a boundary
        iff it is in ``boundaries``."""
        cut = set(boundaries)
        return cls(tuple(t for t in positions if t not in cut), tuple((t, t) for t in positions if t in cut))

    @property
    def known(self) -> int:
        """The number of decisions: no-boundary positions plus gaps."""
        return len(self.zeros) + len(self.gaps)

    def check(self, n_turns: int) -> None:
        """Every position in 1 .. n_turns - 1, gaps not overlapping each other or the zeros."""
        seen: set[int] = set()
        for first, last in [(t, t) for t in self.zeros] + list(self.gaps):
            span = set(range(first, last + 1))
            if not span or not 0 < first <= last < n_turns or span & seen:
                raise ValueError(f"BoundaryLabels: position range ({first}, {last}) is empty, outside 1 .. "
                                 f"{n_turns - 1} or overlaps another")
            seen |= span


def boundary_label_loss(logits: Sequence[torch.Tensor], labels: Sequence[BoundaryLabels],
                        pos_weight: float | None = None) -> torch.Tensor:
    """Mean negative log-likelihood of ``labels`` under independent p(boundary) = sigmoid(logit)
    (logits[i][t - 1] for position t), over every decision: -log(1 - p) at a zero, and at a gap
    -log P(exactly one boundary in it) = -sum log(1 - p_s) - logsumexp(logit_s) over its
    positions; ``pos_weight`` weighs the gaps (more recall). A gap of one position is the
    binary cross-entropy of a boundary, so exact labels give the masked cross-entropy."""
    if len(logits) != len(labels):
        raise ValueError(f"boundary_label_loss: {len(logits)} sessions of logits but {len(labels)} of labels")
    weight = 1.0 if pos_weight is None else float(pos_weight)
    terms, count = [], 0
    for session_logits, session_labels in zip(logits, labels):
        session_labels.check(len(session_logits) + 1)
        if session_labels.zeros:
            zeros = session_logits[[t - 1 for t in session_labels.zeros]]
            terms.append(-F.logsigmoid(-zeros).sum())
        for first, last in session_labels.gaps:
            gap = session_logits[first - 1:last]
            terms.append(weight * (-F.logsigmoid(-gap).sum() - torch.logsumexp(gap, dim=0)))
        count += session_labels.known
    if not terms:  # nothing to decide: a zero that still backpropagates
        return sum((lg.sum() * 0.0 for lg in logits), torch.zeros(()))
    return torch.stack(terms).sum() / count


def label_f1(predicted: Sequence[Sequence[int]], labels: Sequence[BoundaryLabels]) -> dict[str, float]:
    """Boundary precision / recall / F1 against ``labels``, micro over sessions: a gap is found
    when a predicted boundary lies in it (one counts as correct, any other there as wrong); a
    predicted boundary at a zero is wrong; predictions at unknown positions are not scored. On
    exact labels this is ``boundary_f1`` over the labelled positions."""
    if len(predicted) != len(labels):
        raise ValueError(f"label_f1: {len(predicted)} predicted sessions but {len(labels)} labelled ones")
    n_predicted = correct = n_gold = 0
    for cuts, session_labels in zip(predicted, labels):
        cuts = set(cuts)
        n_predicted += len(cuts & set(session_labels.zeros))
        for first, last in session_labels.gaps:
            inside = len(cuts & set(range(first, last + 1)))
            n_predicted += inside
            correct += inside > 0
        n_gold += len(session_labels.gaps)
    precision = correct / n_predicted if n_predicted else float(n_gold == 0)
    recall = correct / n_gold if n_gold else float(n_predicted == 0)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "predicted": n_predicted, "gold": n_gold,
            "correct": correct}


def span_shape(boundaries: Sequence[Sequence[int]], n_turns: Sequence[int]) -> dict[str, float]:
    """The events a segmentation makes: their number, mean turns per event and the share of
    single-turn events (sessions of ``n_turns`` turns cut at ``boundaries``)."""
    lengths = [b - a for cuts, n in zip(boundaries, n_turns) if n
               for a, b in zip([0, *cuts], [*cuts, n])]
    return {"events": len(lengths), "mean_turns_per_event": round(sum(lengths) / max(len(lengths), 1), 3),
            "single_turn_event_share": round(sum(n == 1 for n in lengths) / max(len(lengths), 1), 3)}


# -- scores -------------------------------------------------------------------------------
def boundary_f1(predicted: Sequence[Sequence[int]], gold: Sequence[Sequence[int]],
                positions: Sequence[Sequence[int]] | None = None) -> dict[str, float]:
    """Precision, recall and F1 of boundary positions, micro over sessions (a boundary counts
    where both place it in the same session); ``positions``: per session, the only positions
    scored (None: all). With nothing predicted precision is 1.0 when nothing was to be found,
    else 0.0; recall likewise with no gold boundary."""
    if len(predicted) != len(gold) or (positions is not None and len(positions) != len(gold)):
        raise ValueError(f"boundary_f1: {len(predicted)} predicted sessions but {len(gold)} gold ones"
                         + ("" if positions is None else f" and {len(positions)} of positions"))
    if positions is not None:
        predicted = [set(p) & set(k) for p, k in zip(predicted, positions)]
        gold = [set(g) & set(k) for g, k in zip(gold, positions)]
    hits = sum(len(set(p) & set(g)) for p, g in zip(predicted, gold))
    n_predicted = sum(len(set(p)) for p in predicted)
    n_gold = sum(len(set(g)) for g in gold)
    precision = hits / n_predicted if n_predicted else float(n_gold == 0)
    recall = hits / n_gold if n_gold else float(n_predicted == 0)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "predicted": n_predicted, "gold": n_gold,
            "correct": hits}


def segmenter_boundaries(segmenter: "Segmenter", teachers: Sequence["TeacherSession"]) -> list[list[int]]:
    """The boundaries of ``segmenter``'s units on each teacher session (the labels' rule)."""
    outputs = segmenter([SegmentIn(t.conversation_id, t.session) for t in teachers]) if teachers else []
    return [session_boundaries(t.session, out.units) for t, out in zip(teachers, outputs)]


def evaluate_segmenter(segmenter: "Segmenter", teachers: Sequence["TeacherSession"],
                       baseline_span: int | None = None) -> dict[str, Any]:
    """``segmenter``'s boundary precision / recall / F1 against the teacher's on ``teachers``
    (one batch, through its ``forward``: any segmenter), the seconds it took, and the same
    scores of ``FixedSpanSegmenter(span=baseline_span)``; ``baseline_span`` defaults to the
    teacher's mean event length on ``teachers``, rounded (a recipe passes its training
    sessions' mean). Scores count the labelled positions only (``labelled_positions``). Only the
    teacher's labels are used, never the LoCoMo annotations."""
    teachers = usable_sessions(teachers)
    if not teachers:
        raise ValueError("evaluate_segmenter: no teacher session with a labelled position to score on")
    gold = [session_boundaries(t.session, t.events) for t in teachers]
    positions = [labelled_positions(t) for t in teachers]
    started = active_seconds()
    predicted = segmenter_boundaries(segmenter, teachers)
    seconds = active_seconds() - started
    span = baseline_span or max(1, round(mean_event_length(teachers)))
    turns = sum(len(t.session.turns) for t in teachers)
    return {
        **boundary_f1(predicted, gold, positions),
        "sessions": len(teachers), "turns": turns, "labelled_positions": sum(map(len, positions)),
        "conversations": sorted({t.conversation_id for t in teachers}),
        "teacher_turns_per_event": round(mean_event_length(teachers), 3),
        "predicted_turns_per_event": round(turns / (len(teachers) + sum(map(len, predicted))), 3),
        "seconds": round(seconds, 2), "turns_per_second": round(turns / max(seconds, 1e-9), 1),
        "baseline": {"segmenter": f"FixedSpanSegmenter(span={span})",
                     **boundary_f1(segmenter_boundaries(FixedSpanSegmenter(span=span), teachers), gold, positions)},
        "labels": "teacher (distilled prompted segmenter); LoCoMo annotations not used",
    }


@dataclass
class SegmenterEvaluator(StageEvaluator[TeacherLabels]):
    """Boundary F1 against the prompted CompassMem segmenter (the teacher, ``teacher``: a config
    whose construction LMs replay the response cache) on the sessions whose construction the
    cache holds (``evaluate_segmenter``), with span baselines."""

    family: ClassVar[type] = Segmenter
    configs: ClassVar[dict[str, str]] = {"teacher": "teacher_overrides"}
    metric: str = "f1"
    teacher: PipelineConfig = "configs/pipelines/compassmem_teacher.yaml"
    teacher_overrides: list[str] = field(default_factory=list)
    #: The fixed-span baseline's span (None: the teacher's mean event length on these sessions;
    #: a recipe records its training sessions' mean).
    baseline_span: PositiveInt | None = None

    def prepare(self, conversations: Sequence[Conversation]) -> TeacherLabels:
        """The teacher's sessions; a ValueError when none has a labelled position."""
        labels = teacher_labels(self, conversations)
        if not usable_sessions(labels.sessions):
            raise ValueError(f"no cached teacher session for {[c.id for c in conversations]} ({dict(labels.counts)}): "
                             f"run the prompted build of {pipeline_label(self.teacher)} on them first")
        return labels

    def score(self, stage: Any, prepared: TeacherLabels) -> dict[str, Any]:
        return {**evaluate_segmenter(stage, prepared.sessions, self.baseline_span), "teacher": dict(prepared.counts)}

    def headline(self, result: dict[str, Any]) -> dict[str, tuple[float | None, int]]:
        return {k: (result[k], result["labelled_positions"]) for k in ("precision", "recall", "f1")}
