"""EDU extraction with structured chunks for long assistant turns (EMem appendix A).

Short turns go through the generic extractor (``edu_extractor``, section 3.2) as a session
with the long turns left out. Each turn longer than ``long_turn_chars`` characters is a
call of its own, with the user message before it: the model writes atomic EDUs of the
response and groups its numbered blocks (paragraphs or list items, split in code) into
structured chunks with a 2-3 sentence summary. A chunk unit's ``text`` is the summary (what
is indexed and gets arguments); ``attributes["content"]`` is the blocks' original text,
copied from the turn (the model never rewrites it), which the answerer is shown instead.
Provenance of everything from a long turn is that turn's id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from memlab.bounds import NonNegativeFloat, PositiveInt
from memlab.lm.base import LM
from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import object_schema, parse_json
from memlab.lm.types import ChatRequest
from memlab.prompts import load_prompt
from memlab.stage import PromptedStage
from memlab.stages.edu.base import EDUExtractor, grounded
from memlab.stages.segment.base import SegmentIn, SegmentOut
from memlab.stages.segment.rules import format_date
from memlab.types import MemoryUnit, Session, Turn

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|#+)\s+")


def split_blocks(text: str, max_blocks: int = 16) -> list[str]:
    """Paragraphs, or list items / headed lines when the text has no blank lines; at most
    ``max_blocks`` (the shortest neighbouring pair is merged until it fits)."""
    blocks = [b.strip() for b in _PARAGRAPH_BREAK.split(text) if b.strip()]
    if len(blocks) <= 1:
        blocks = []
        for line in text.splitlines():
            if not line.strip():
                continue
            if blocks and not _LIST_ITEM.match(line):
                blocks[-1] += "\n" + line.strip()
            else:
                blocks.append(line.strip())
    while len(blocks) > max_blocks:
        i = min(range(len(blocks) - 1), key=lambda k: len(blocks[k]) + len(blocks[k + 1]))
        blocks[i: i + 2] = [blocks[i] + "\n" + blocks[i + 1]]
    return blocks or [text.strip()]


@dataclass(frozen=True)
class LongTurn:
    conversation_id: str
    session: Session
    turn: Turn
    request: str
    blocks: tuple[str, ...]


def chunk_schema(max_edus: int | None = None, max_chunks: int | None = None) -> dict:
    edus: dict = {"type": "array", "items": {"type": "string"}}
    chunk = object_schema({"first_block": {"type": "integer"}, "last_block": {"type": "integer"},
                           "summary": {"type": "string", "minLength": 1}})
    chunks: dict = {"type": "array", "items": chunk}
    if max_edus is not None:
        edus["maxItems"] = max_edus
    if max_chunks is not None:
        chunks["maxItems"] = max_chunks
    return object_schema({"edus": edus, "chunks": chunks})


class StructuredChunkEDUExtractor(PromptedStage, EDUExtractor):
    """Generic EDUs for short turns + atomic EDUs and structured chunks per long turn."""

    def __init__(
        self,
        lm: LM,
        edu_extractor: EDUExtractor,
        prompt: str = "emem/structured_chunks",
        long_turn_chars: PositiveInt = 1000,
        max_edus: PositiveInt = 10,
        max_chunks: PositiveInt = 4,
        max_blocks: PositiveInt = 16,
        max_request_chars: PositiveInt = 600,
        max_tokens: PositiveInt = 1024,
        temperature: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__(lm=lm, max_tokens=max_tokens, temperature=temperature)
        self.edu_extractor = edu_extractor
        self.prompt = load_prompt(prompt)
        self.long_turn_chars = long_turn_chars
        self.max_edus = max_edus
        self.max_chunks = max_chunks
        self.max_blocks = max_blocks
        self.max_request_chars = max_request_chars

    def is_long(self, turn: Turn) -> bool:
        return len(turn.text) > self.long_turn_chars

    def long_turns(self, item: SegmentIn) -> list[LongTurn]:
        out = []
        turns = item.session.turns
        for i, turn in enumerate(turns):
            if self.is_long(turn):
                request = next((t.render() for t in reversed(turns[:i]) if not self.is_long(t)), "(none)")
                out.append(LongTurn(item.conversation_id, item.session, turn,
                                    request[: self.max_request_chars], tuple(split_blocks(turn.text, self.max_blocks))))
        return out

    def forward(self, batch: list[SegmentIn]) -> list[SegmentOut]:  # type: ignore[override]
        short = [SegmentIn(i.conversation_id, replace(i.session, turns=tuple(t for t in i.session.turns if not self.is_long(t))))
                 for i in batch]
        generic = self.edu_extractor([s for s in short if s.session.turns])
        generic_by_session = {(s.conversation_id, s.session.id): out
                              for s, out in zip([s for s in short if s.session.turns], generic)}
        long_items = [lt for item in batch for lt in self.long_turns(item)]
        long_outputs = PromptedStage.forward(self, long_items) if long_items else []
        results = []
        for item in batch:
            key = (item.conversation_id, item.session.id)
            base = generic_by_session.get(key, SegmentOut(()))
            units, errors = list(base.units), [base.error] if base.error else []
            for long_turn, (extra, error) in zip(long_items, long_outputs):
                if (long_turn.conversation_id, long_turn.session.id) == key:
                    units.extend(extra)
                    if error:
                        errors.append(error)
            results.append(SegmentOut(tuple(units), "; ".join(errors) or None))
        return results

    def render(self, item: LongTurn) -> ChatRequest:  # type: ignore[override]
        blocks = "\n".join(f"[{n}] {block}" for n, block in enumerate(item.blocks, start=1))
        text = self.prompt.render(date=format_date(item.session), request=item.request, blocks=blocks,
                                  max_edus=self.max_edus, max_chunks=self.max_chunks)
        return self.request(text, json_schema=chunk_schema(self.max_edus, self.max_chunks))

    def parse(self, text: str, item: LongTurn) -> tuple[list[MemoryUnit], str | None]:  # type: ignore[override]
        data = parse_json(text, chunk_schema())
        units: list[MemoryUnit] = []
        for edu in data["edus"][: self.max_edus]:
            edu = " ".join(str(edu).split())
            if edu and grounded(edu, (item.turn,)):
                units.append(self._unit(item, f"edu{len(units)}", edu, "edu"))
        n_blocks = len(item.blocks)
        for n, chunk in enumerate(data["chunks"][: self.max_chunks]):
            first, last = sorted((chunk["first_block"], chunk["last_block"]))
            first, last = max(first, 1), min(last, n_blocks)
            summary = " ".join(chunk["summary"].split())
            if first > last or not summary:
                continue
            content = "\n".join(item.blocks[first - 1: last])
            units.append(self._unit(item, f"chunk{n}", summary, "chunk", content=content, blocks=[first, last]))
        if not units and (data["edus"] or data["chunks"]):
            raise ParseError("no EDU or chunk of the reply fits the response")
        return units, None

    def fallback(self, item: LongTurn, error: str) -> tuple[list[MemoryUnit], str | None]:  # type: ignore[override]
        return [], error

    @staticmethod
    def _unit(item: LongTurn, name: str, text: str, kind: str, **attributes) -> MemoryUnit:
        return MemoryUnit(
            id=f"{item.conversation_id}/{item.session.id}/{item.turn.id}/{name}",
            text=text,
            source_ids=(item.turn.id,),
            timestamp=item.session.timestamp,
            kind=kind,
            speaker=item.turn.speaker,
            attributes={"session": item.session.id, "speakers": [item.turn.speaker], **attributes},
        )
