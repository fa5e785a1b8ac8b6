"""Span segmenters: a session cut into consecutive spans of turns, each span one event.

``SpanSegmenter`` is what they share: a segmenter decides only *where* a session's events
begin (``predict_boundaries``: the indices t >= 1 of the turns that start a new event), and
``forward`` turns the spans into event units with exactly the unit convention of
``PromptedEventSegmenter`` (``event_unit``): kind ``event``, ``source_ids`` the span's turn
ids, ``timestamp`` the session date, ``attributes`` ``session``, ``participants`` (the speakers
of the span, at most ``max_people``) and ``extractive=True``, since the text is the span's
turns themselves (``extractive_summary``: ``Speaker: text ...``, image captions included).
The whole session is one window (index 0), so unit ids are ``<conversation>/<session>/w0/event<n>``.

* ``FixedSpanSegmenter``: every ``span`` turns (the baseline of the trained segmenter).
* ``BoundarySegmenter``: a boundary tagger trained by distillation of the prompted segmenter
  (``memlab.training.segmentation``; recipe ``memlab.recipes.train_event_segmenter``). Each turn,
  rendered as ``Turn.render()`` does, is pooled into one vector by the ``TextEncoder``; a
  one-layer bidirectional GRU reads a session's turn vectors in order; for every t >= 1 a small
  MLP over (context of turn t-1, context of turn t, cosine of the two turns' encoder vectors)
  gives the logit of p(boundary before turn t). Decoding (``decode_boundaries``): a boundary
  wherever p > ``threshold`` (with ``peaks_only``, only where p is also a local maximum: labels
  that place one boundary somewhere in a gap spread p over the gap's positions, and the likeliest
  position stands for the gap), and one forced where an event would otherwise grow past
  ``max_span`` turns (default 10: the prompted segmenter's window, which no teacher event
  exceeds). No LM is involved: segmentation costs one encoder pass over the session's turns.
* ``WindowBoundarySegmenter``: the same tagger with no recurrence: p(boundary before turn t)
  reads only the turns around t (``window`` turns either side: their vectors, means and
  cosines), so it cannot learn *where* in a session a boundary usually falls, only what the
  text on both sides says. Trained on boundaries derived from LoCoMo's observation annotations
  (``memlab.training.observation_boundaries``), or on the teacher's, by the same recipe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

from memlab.bounds import PositiveInt, Range, UnitFloat
from memlab.stages.encoder import EncoderStage, TextEncoder
from memlab.stages.segment.base import Segmenter, SegmentIn, SegmentOut
from memlab.stages.segment.prompted import event_unit, extractive_summary, speakers_of
from memlab.stages.segment.windows import TurnWindow, annotated_lines
from memlab.types import MemoryUnit, Session


def span_events(item: SegmentIn, boundaries: Sequence[int], max_people: int) -> tuple[MemoryUnit, ...]:
    """The event units of ``item``'s session cut before each turn index in ``boundaries``."""
    turns = item.session.turns
    if not turns and not boundaries:
        return ()
    cuts = [0, *boundaries, len(turns)]
    if any(not 0 < t < len(turns) for t in boundaries) or any(a >= b for a, b in zip(cuts, cuts[1:])):
        raise ValueError(f"boundaries {list(boundaries)} are not increasing turn indices in [1, {len(turns) - 1}]")
    # The whole session is one window, made as the prompted segmenter makes its windows.
    window = TurnWindow(item.conversation_id, item.session, turns, annotated_lines(item.session, turns, None), 0)
    units = []
    for n, (start, end) in enumerate(zip(cuts, cuts[1:])):
        span = turns[start:end]
        ids = tuple(turn.id for turn in span)
        units.append(event_unit(window, n, extractive_summary(span), ids, speakers_of(span, ids, max_people),
                                extractive=True))
    return tuple(units)


def decode_boundaries(probabilities: Sequence[float], threshold: float, max_span: int | None,
                      peaks_only: bool = False) -> list[int]:
    """Turn indices t >= 1 starting an event: ``probabilities[t - 1]`` (p(boundary before turn
    t)) above ``threshold`` (and, with ``peaks_only``, at least its neighbours' p), or the event
    begun at the last boundary already ``max_span`` turns long (None: no limit). Left to right,
    so every event has at most ``max_span`` turns."""
    cuts: list[int] = []
    start = 0
    last = len(probabilities)
    for t, p in enumerate(probabilities, start=1):
        peak = not peaks_only or (p >= (probabilities[t - 2] if t > 1 else 0.0)
                                  and p >= (probabilities[t] if t < last else 0.0))
        if (p > threshold and peak) or (max_span is not None and t - start >= max_span):
            cuts.append(t)
            start = t
    return cuts


class SpanSegmenter(Segmenter):
    """A segmenter that only places boundaries; ``forward`` makes the units (module docstring)."""

    max_people: int

    def predict_boundaries(self, sessions: list[Session]) -> list[list[int]]:  # pragma: no cover - abstract
        """Per session, the increasing indices t >= 1 of the turns that start an event."""
        raise NotImplementedError

    def forward(self, batch: list[SegmentIn]) -> list[SegmentOut]:
        boundaries = self.predict_boundaries([item.session for item in batch]) if batch else []
        return [SegmentOut(span_events(item, cuts, self.max_people)) for item, cuts in zip(batch, boundaries)]


class FixedSpanSegmenter(SpanSegmenter):
    """Events of ``span`` consecutive turns (the last one of a session shorter): the baseline."""

    def __init__(self, span: PositiveInt = 3, max_people: PositiveInt = 3) -> None:
        super().__init__()
        self.span = span
        self.max_people = max_people

    def predict_boundaries(self, sessions: list[Session]) -> list[list[int]]:
        return [list(range(self.span, len(session.turns), self.span)) for session in sessions]


class BoundarySegmenter(EncoderStage, SpanSegmenter):
    """Trained event boundaries over a session's turn encodings (module docstring).

    A frozen ``encoder`` (the recipe's setting) keeps the packaged encoder as it is: only the
    GRU and the head train, turn vectors can be computed once per training run, and the
    checkpoint holds the GRU and the head only. An encoder that trains (a LoRA adapter, or all
    of it) saves what it learnt in the checkpoint's ``encoder/`` folder. Weights load on first use (``memlab.stages.encoder``).

    Training API: ``boundary_logits(sessions)`` (differentiable; per session a ``[n_turns - 1]``
    tensor, entry t-1 the logit of a boundary before turn t), the same from precomputed turn
    vectors (``encode_sessions`` + ``logits_from_vectors``) and ``predict_boundaries``; the loss
    over labels is ``memlab.training.segmentation.boundary_label_loss``.
    """

    def __init__(
        self,
        encoder: TextEncoder,
        context_size: PositiveInt = 128,
        dropout: Annotated[float, Range(0, 1, open_max=True)] = 0.1,
        threshold: UnitFloat = 0.5,
        max_span: PositiveInt | None = 10,
        max_people: PositiveInt = 3,
        batch_size: PositiveInt = 64,
        device: str = "cpu",
        peaks_only: bool = False,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.context_size = context_size
        self.threshold = threshold
        self.peaks_only = peaks_only
        self.max_span = max_span
        self.max_people = max_people
        self.batch_size = batch_size
        self.device = device
        self.input_dropout = nn.Dropout(dropout)
        self.dropout = dropout
        self.context: nn.GRU | None = None
        self.head: nn.Sequential | None = None

    def _build_heads(self, hidden_size: int) -> None:
        self.context = nn.GRU(hidden_size, self.context_size, batch_first=True, bidirectional=True)
        # Both sides' context (2 x bidirectional) and the cosine of the two turns' vectors.
        self.head = nn.Sequential(nn.Linear(4 * self.context_size + 1, self.context_size), nn.GELU(),
                                  nn.Dropout(self.dropout), nn.Linear(self.context_size, 1))

    # -- encoding ------------------------------------------------------------------------
    def encode_sessions(self, sessions: list[Session]) -> list[torch.Tensor]:
        """Per session, its turn vectors ``[n_turns, hidden]`` (each turn as ``Turn.render()``)."""
        vectors = self.encode_texts([turn.render() for session in sessions for turn in session.turns])
        return list(torch.split(vectors, [len(session.turns) for session in sessions]))

    # -- boundaries ----------------------------------------------------------------------
    def logits_from_vectors(self, vectors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per session (its turn vectors), the boundary logits ``[n_turns - 1]``; differentiable."""
        self.warm_up()
        out: list[torch.Tensor] = [torch.zeros(0, device=self.device) for _ in vectors]
        present = [i for i, v in enumerate(vectors) if len(v) > 1]  # one turn: no position to decide
        if not present:
            return out
        rows = [vectors[i].to(self.device) for i in present]
        lengths = torch.tensor([len(v) for v in rows])
        packed = pack_padded_sequence(self.input_dropout(pad_sequence(rows, batch_first=True)), lengths,
                                      batch_first=True, enforce_sorted=False)
        context, _ = pad_packed_sequence(self.context(packed)[0], batch_first=True)
        pairs = []
        for row, (v, n) in enumerate(zip(rows, lengths.tolist())):
            h = context[row, :n]
            similarity = F.cosine_similarity(v[:-1], v[1:], dim=-1).unsqueeze(-1)
            pairs.append(torch.cat([h[:-1], h[1:], similarity], dim=-1))
        logits = self.head(torch.cat(pairs)).squeeze(-1)
        for i, part in zip(present, torch.split(logits, [n - 1 for n in lengths.tolist()])):
            out[i] = part
        return out

    def boundary_logits(self, sessions: list[Session]) -> list[torch.Tensor]:
        """Per session, the logits ``[n_turns - 1]`` of a boundary before turns 1 .. n-1; differentiable."""
        if isinstance(sessions, Session):
            raise TypeError("BoundarySegmenter.boundary_logits takes a list of sessions, got one Session")
        return self.logits_from_vectors(self.encode_sessions(list(sessions)))

    def boundary_probabilities(self, sessions: list[Session],
                               vectors: list[torch.Tensor] | None = None) -> list[list[float]]:
        """Per session, p(boundary before turn t) for t = 1 .. n-1 (eval mode, no gradient);
        ``vectors``: the sessions' turn vectors from ``encode_sessions``, when already computed
        (a frozen encoder's, reused across a training run's validations)."""
        if vectors is not None and [len(v) for v in vectors] != [len(s.turns) for s in sessions]:
            raise ValueError("BoundarySegmenter: the vectors given are not those of the sessions' turns")
        with self.inference():
            logits = self.boundary_logits(sessions) if vectors is None else self.logits_from_vectors(vectors)
            return [torch.sigmoid(lg).tolist() for lg in logits]

    def predict_boundaries(self, sessions: list[Session],
                           vectors: list[torch.Tensor] | None = None) -> list[list[int]]:
        return [decode_boundaries(p, self.threshold, self.max_span, self.peaks_only)
                for p in self.boundary_probabilities(sessions, vectors)]


class WindowBoundarySegmenter(BoundarySegmenter):
    """Boundaries from the turns around each position only (module docstring): no recurrence
    over the session, so the score of a position does not depend on how far into the session
    it lies (the BiGRU tagger learnt exactly that from the 10-turn-window teacher).

    For position t (a boundary before turn t), with the turn vectors v projected to
    ``context_size`` (u = W v): u[t-1], u[t], the projected means of the ``window`` turns before
    and from t (clipped at the session's edges), their elementwise products, and the cosines
    of v[t-1], v[t] and of the two windows' mean vectors; a small MLP gives the logit.
    Everything else (training API, decoding, saving) is ``BoundarySegmenter``'s; ``peaks_only``
    defaults to True, the decoding for gap labels.
    """

    def __init__(self, encoder: TextEncoder, window: PositiveInt = 3, context_size: PositiveInt = 128,
                 dropout: Annotated[float, Range(0, 1, open_max=True)] = 0.1, threshold: UnitFloat = 0.5,
                 max_span: PositiveInt | None = 10, max_people: PositiveInt = 3, batch_size: PositiveInt = 64,
                 device: str = "cpu", peaks_only: bool = True) -> None:
        super().__init__(encoder, context_size, dropout, threshold, max_span, max_people, batch_size, device,
                         peaks_only)
        self.window = window
        self.project: nn.Linear | None = None

    def _build_heads(self, hidden_size: int) -> None:
        self.project = nn.Linear(hidden_size, self.context_size)
        self.head = nn.Sequential(nn.Linear(6 * self.context_size + 2, self.context_size), nn.GELU(),
                                  nn.Dropout(self.dropout), nn.Linear(self.context_size, 1))

    def window_means(self, vectors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per position t = 1 .. n-1, the mean vector of turns [t - window, t) and of [t, t + window)."""
        n = len(vectors)
        sums = torch.cat([torch.zeros_like(vectors[:1]), vectors.cumsum(0)])  # sums[i] = sum of vectors[:i]
        t = torch.arange(1, n, device=vectors.device)
        left_start = (t - self.window).clamp(min=0)
        right_end = (t + self.window).clamp(max=n)
        left = (sums[t] - sums[left_start]) / (t - left_start).unsqueeze(-1)
        right = (sums[right_end] - sums[t]) / (right_end - t).unsqueeze(-1)
        return left, right

    def logits_from_vectors(self, vectors: list[torch.Tensor]) -> list[torch.Tensor]:
        self.warm_up()
        out: list[torch.Tensor] = []
        for v in vectors:
            v = v.to(self.device)
            if len(v) < 2:  # one turn: no position to decide
                out.append(torch.zeros(0, device=self.device))
                continue
            left, right = self.window_means(v)
            u = self.project(self.input_dropout(v))
            left_u, right_u = self.project(self.input_dropout(left)), self.project(self.input_dropout(right))
            features = torch.cat([u[:-1], u[1:], u[:-1] * u[1:], left_u, right_u, left_u * right_u,
                                  F.cosine_similarity(v[:-1], v[1:], dim=-1).unsqueeze(-1),
                                  F.cosine_similarity(left, right, dim=-1).unsqueeze(-1)], dim=-1)
            out.append(self.head(features).squeeze(-1))
        return out
