"""The "w/o semantic compression" ablation (SimpleMem Table 5): a window stored as a raw chunk."""

from __future__ import annotations

from memlab.dates import format_day
from memlab.stages.compress.base import CompressIn, Compressor, CompressOut
from memlab.types import MemoryUnit


class ChunkCompressor(Compressor):
    """Stores each window as it is: one unit with the window's turns, headed by the session
    date, no filtering, no coreference or time normalisation (standard chunk-based storage).
    Pair it with ``stride == window`` for non-overlapping chunks."""

    def forward(self, batch: list[CompressIn]) -> list[CompressOut]:
        outputs = []
        for item in batch:
            if not item.turns:
                outputs.append(CompressOut(units=()))
                continue
            session = item.session
            header = f"[{format_day(session.timestamp)}]" if session.timestamp else "[unknown date]"
            text = header + "\n" + "\n".join(turn.render() for turn in item.turns)
            unit = MemoryUnit(
                id=f"{item.conversation_id}/{item.window_id}/chunk",
                text=text,
                source_ids=item.turn_ids,
                timestamp=item.turns[0].timestamp or session.timestamp,
                kind="chunk",
                attributes={"session": session.id, "entities": [], "topic": "", "salience": "medium"},
            )
            outputs.append(CompressOut(units=(unit,)))
        return outputs
