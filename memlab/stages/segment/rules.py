"""Deterministic segmenters: one unit per turn, and fixed-size token chunks."""

from __future__ import annotations

from typing import Annotated

from memlab.bounds import Range
from memlab.dates import format_day
from memlab.stages.segment.base import Segmenter, SegmentIn, SegmentOut
from memlab.stages.temporal.base import TemporalIn, TemporalNormalizer
from memlab.types import MemoryUnit, Session, Turn


def format_date(session: Session) -> str:
    return format_day(session.timestamp) if session.timestamp else "unknown date"


class TurnSegmenter(Segmenter):
    """One unit per turn, rendered as ``[date] speaker: text`` so each unit carries its time.

    With a ``normalizer`` (a temporal stage, e.g. ``RuleTemporalNormalizer``), relative time
    expressions are resolved against the session date inside the text: "yesterday (7 May
    2023)". A unit then says when things happened, not only when they were said, which both
    the retriever and the answerer can use ("3 days ago" is no answer to "when").
    """

    def __init__(self, with_date: bool = True, normalizer: TemporalNormalizer | None = None) -> None:
        super().__init__()
        self.with_date = with_date
        self.normalizer = normalizer

    def render_turn(self, session: Session, turn: Turn) -> str:
        text = turn.render()
        reference = turn.timestamp or session.timestamp
        if self.normalizer is not None and reference is not None:
            text = self.normalizer.rewrite([TemporalIn(text, reference)])[0]
        return f"[{format_date(session)}] {text}" if self.with_date else text

    def forward(self, batch: list[SegmentIn]) -> list[SegmentOut]:
        return [
            SegmentOut(
                units=tuple(
                    MemoryUnit(
                        id=f"{item.conversation_id}/{turn.id}",
                        text=self.render_turn(item.session, turn),
                        source_ids=(turn.id,),
                        timestamp=turn.timestamp or item.session.timestamp,
                        kind="turn",
                        speaker=turn.speaker,
                        attributes={"session": item.session.id},
                    )
                    for turn in item.session.turns
                )
            )
            for item in batch
        ]


class TokenChunkSegmenter(Segmenter):
    """Consecutive turns packed into chunks of at most ``chunk_tokens`` tokens, per session.

    The plain RAG baseline of the CompassMem paper (512-token chunks). Tokens are counted with
    the default embedder's tokenizer, the one the retriever encodes them with; a session's date
    heads each chunk. A turn longer than a chunk is a chunk of its own (the embedder truncates).
    """

    def __init__(self, chunk_tokens: Annotated[int, Range(min=16)] = 512) -> None:
        super().__init__()
        self.chunk_tokens = chunk_tokens

    def forward(self, batch: list[SegmentIn]) -> list[SegmentOut]:
        from memlab.embed import default_token_counter

        count = default_token_counter()
        outputs = []
        for item in batch:
            header = f"[{format_date(item.session)}]"
            chunks: list[list[Turn]] = []
            size = count(header)
            for turn in item.session.turns:
                n = count(turn.render())
                if chunks and size + n <= self.chunk_tokens:
                    chunks[-1].append(turn)
                    size += n
                else:
                    chunks.append([turn])
                    size = count(header) + n
            outputs.append(
                SegmentOut(
                    units=tuple(
                        MemoryUnit(
                            id=f"{item.conversation_id}/{item.session.id}/chunk{i}",
                            text="\n".join([header] + [t.render() for t in turns]),
                            source_ids=tuple(t.id for t in turns),
                            timestamp=item.session.timestamp,
                            kind="chunk",
                            attributes={"session": item.session.id},
                        )
                        for i, turns in enumerate(chunks)
                    )
                )
            )
        return outputs
