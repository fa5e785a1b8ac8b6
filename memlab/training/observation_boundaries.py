"""Event boundaries derived from LoCoMo's observation annotations: what belongs together, by content.

LoCoMo annotates each session with observations: atomic facts about a speaker, each citing the
turn(s) it was read from (``Conversation.annotations``; training only, no pipeline reads them).
They say where the session's content lies, and their texts say which content is one topic. The
labels of a session (``session_labels``) follow from that alone:

* Each observation is anchored at its earliest cited turn of the session; observations at the
  same turn are one event, as are the turns one observation cites together (no boundary
  between its first and last cited turn).
* Two consecutive anchors (in turn order) are the same event when their texts, with the
  speakers' names removed (every fact names its speaker, which would make any two facts of one
  speaker alike), are similar: cosine at least ``threshold``. Then no position between them
  holds a boundary. Otherwise exactly one boundary lies between them, where is not known: the
  positions after the earlier anchor up to the later one form a gap (``BoundaryLabels``).
* Turns before the first anchor and after the last belong to the first and last event (chat
  that states no fact joins the content next to it): zeros.
* A session with no observation has no label (left out).

``threshold`` is calibrated per embedder and conversation, not fixed: the ``percentile`` of the
cosines between observations of *different* sessions of the conversation (pairs that are almost
always different events), so "same event" means "as similar as only the top (100 - percentile)%
of unrelated pairs". The default 90 gives 3.7-5.3 turns per event on the seven dev
conversations with all-MiniLM-L6-v2 (BENCHMARKS.md, "Issue 40").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import datasets
import numpy as np

from memlab.embed.similarity import cross_group_percentile, unit_rows
from memlab.stages.segment import FixedSpanSegmenter, SegmentIn
from memlab.training.segmentation import BoundaryLabels, label_f1, session_boundaries, span_shape

if TYPE_CHECKING:
    from memlab.embed import Embedder
    from memlab.types import Conversation, Session

#: For dataset cards and training records.
OBSERVATION_SOURCE = ("LoCoMo's observation annotations (facts with their source turn ids): consecutive facts of a "
                      "session whose texts (speaker names removed) are at least as similar as the given percentile of "
                      "cross-session fact pairs are one event, else one boundary lies between their turns "
                      "(memlab.training.observation_boundaries)")

OBSERVATION_FEATURES = datasets.Features(
    {
        "conversation_id": datasets.Value("string"),
        "session_id": datasets.Value("string"),
        "turns": datasets.List(datasets.Value("string")),
        "zeros": datasets.List(datasets.Value("int64")),
        "gap_first": datasets.List(datasets.Value("int64")),
        "gap_last": datasets.List(datasets.Value("int64")),
    }
)


def without_names(text: str, names: Sequence[str]) -> str:
    """``text`` with each of ``names`` (and its possessive) removed, spaces tidied."""
    for name in names:
        text = re.sub(rf"\b{re.escape(name)}(?:'s)?\b", " ", text)
    return " ".join(text.split())


def session_labels(session: "Session", anchors: Sequence[tuple[int, int]], similarity: np.ndarray,
                   threshold: float) -> BoundaryLabels:
    """The labels of ``session`` (module docstring) from its observations' ``anchors``: (first
    cited turn index, last cited turn index) per observation, ``similarity`` their cosines."""
    n = len(session.turns)
    order = sorted(range(len(anchors)), key=lambda i: anchors[i][0])
    together: set[int] = set()  # positions inside one observation's cited turns
    for first, last in anchors:
        together.update(range(first + 1, last + 1))
    groups: list[tuple[int, list[int]]] = []  # (anchor turn, observations anchored there)
    for i in order:
        if groups and groups[-1][0] == anchors[i][0]:
            groups[-1][1].append(i)
        else:
            groups.append((anchors[i][0], [i]))
    zeros = set(range(1, groups[0][0] + 1)) | set(range(groups[-1][0] + 1, n))
    gaps = []
    for (turn_a, facts_a), (turn_b, facts_b) in zip(groups, groups[1:]):
        between = range(turn_a + 1, turn_b + 1)
        if max(similarity[a, b] for a in facts_a for b in facts_b) >= threshold:
            zeros.update(between)
        else:
            gap = [t for t in between if t not in together]
            # a gap that an observation's cited turns split in two is left unknown
            if gap and gap == list(range(gap[0], gap[-1] + 1)):
                gaps.append((gap[0], gap[-1]))
    zeros |= together
    gap_positions = {t for first, last in gaps for t in range(first, last + 1)}
    labels = BoundaryLabels(tuple(sorted(zeros - gap_positions)), tuple(gaps))
    labels.check(n)
    return labels


def observation_labels(conversation: "Conversation", embedder: "Embedder",
                       percentile: float = 90.0) -> dict[str, BoundaryLabels]:
    """Per session id of ``conversation`` with an observation, its ``BoundaryLabels`` (module
    docstring); a conversation without observations gives none."""
    sessions = {session.id: session for session in conversation.sessions}
    rows = []  # (session id, anchor, text)
    for annotation in conversation.annotations:
        session = sessions.get(annotation.session_id)
        if session is None:
            continue
        index = {turn.id: t for t, turn in enumerate(session.turns)}
        for observation in annotation.observations:
            cited = sorted(index[i] for i in observation.source_ids if i in index)
            if cited:
                rows.append((session.id, (cited[0], cited[-1]),
                             without_names(observation.text, conversation.speakers)))
    if len({row[0] for row in rows}) < 2:
        return {}
    vectors = unit_rows(embedder.encode([row[2] for row in rows]))
    threshold = cross_group_percentile(vectors, [row[0] for row in rows], percentile)
    labels = {}
    for session_id in dict.fromkeys(row[0] for row in rows):
        members = [i for i, row in enumerate(rows) if row[0] == session_id]
        similarity = vectors[members] @ vectors[members].T
        labels[session_id] = session_labels(sessions[session_id], [rows[i][1] for i in members], similarity,
                                            threshold)
    return labels


def observation_examples(conversations: Sequence["Conversation"], labels: dict[tuple[str, str], BoundaryLabels],
                         percentile: float, embedder_name: str) -> datasets.Dataset:
    """One row per labelled session (``labels`` keyed by (conversation id, session id)): its
    turns as the segmenter reads them, its zeros and gaps; the card says where the labels came from."""
    rows = []
    for conversation in conversations:
        for session in conversation.sessions:
            found = labels.get((conversation.id, session.id))
            if found is not None:
                rows.append({"conversation_id": conversation.id, "session_id": session.id,
                             "turns": [turn.render() for turn in session.turns], "zeros": list(found.zeros),
                             "gap_first": [g[0] for g in found.gaps], "gap_last": [g[1] for g in found.gaps]})
    turns = sum(len(row["turns"]) for row in rows)
    gaps = sum(len(row["gap_first"]) for row in rows)
    zeros = sum(len(row["zeros"]) for row in rows)
    in_gaps = sum(b - a + 1 for row in rows for a, b in zip(row["gap_first"], row["gap_last"]))
    unknown = turns - len(rows) - zeros - in_gaps
    card = f"""memlab event-segmentation supervision from annotations (memlab.training.observation_boundaries).
Source of the labels: {OBSERVATION_SOURCE}. Percentile {percentile}, embedder {embedder_name}.
Rows: one session: its turns rendered as the segmenter reads them, the positions holding no boundary (zeros) and the
gaps (first, last position) holding exactly one. No prompted segmenter's output is used.
Conversations: {sorted({row['conversation_id'] for row in rows})}.
Sessions: {len(rows)}; turns: {turns}; zeros: {zeros}; gaps: {gaps} (events {gaps + len(rows)}, mean \
{turns / max(gaps + len(rows), 1):.2f} turns per event); positions in gaps: {in_gaps}; left unknown: {unknown}."""
    info = datasets.DatasetInfo(description=card, features=OBSERVATION_FEATURES)
    if not rows:
        return datasets.Dataset.from_dict({name: [] for name in OBSERVATION_FEATURES}, features=OBSERVATION_FEATURES,
                                          info=info)
    return datasets.Dataset.from_list(rows, features=OBSERVATION_FEATURES, info=info)


def evaluate_on_observations(segmenter, conversations: Sequence["Conversation"],
                             labels: dict[tuple[str, str], BoundaryLabels], baseline_span: int) -> dict:
    """``segmenter``'s ``label_f1`` against the observation ``labels`` of ``conversations``'
    labelled sessions and the shape of its events on them, beside ``FixedSpanSegmenter(span=
    baseline_span)`` and the labels' own shape."""
    items = [(c.id, s) for c in conversations for s in c.sessions if (c.id, s.id) in labels]
    if not items:
        raise ValueError(f"no session of {[c.id for c in conversations]} has observation labels")
    gold = [labels[(cid, s.id)] for cid, s in items]
    sizes = [len(s.turns) for _, s in items]

    def scored(candidate) -> dict:
        outputs = candidate([SegmentIn(cid, s) for cid, s in items])
        cuts = [session_boundaries(s, out.units) for (_, s), out in zip(items, outputs)]
        return {**label_f1(cuts, gold), **span_shape(cuts, sizes)}

    label_events = [len(g.gaps) + 1 for g in gold]
    return {**scored(segmenter), "sessions": len(items), "turns": sum(sizes),
            "conversations": sorted({cid for cid, _ in items}),
            "labels_turns_per_event": round(sum(sizes) / sum(label_events), 3),
            "baseline": {"segmenter": f"FixedSpanSegmenter(span={baseline_span})",
                         **scored(FixedSpanSegmenter(span=baseline_span))},
            "labels": OBSERVATION_SOURCE}
