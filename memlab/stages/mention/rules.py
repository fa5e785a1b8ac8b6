"""Named-entity mention detector without a model (the "w/ Query NED" ablation, EMem Tables 5-6).

Mentions are (1) runs of capitalised words in the question (the first word only when it is
not a question word or a common sentence opener), and (2) names already in memory
(``known_entities``, the argument nodes) that occur in the question as whole words,
case-insensitively. No model is downloaded.
"""

from __future__ import annotations

import re

from memlab.bounds import NonNegativeInt, PositiveInt
from memlab.stages.mention.base import MentionDetector, MentionIn, MentionOut, dedupe

_CAPITALISED_RUN = re.compile(r"\b[A-Z][\w'&-]*(?:\s+(?:of|the|de)?\s*[A-Z][\w'&-]*)*")
_POSSESSIVE = re.compile(r"'s?$")
_OPENERS = frozenset(
    "what when where who whom whose which why how did does do is are was were has have had can could would "
    "should will in on at the a an if according".split()
)


class EntityMentionDetector(MentionDetector):
    """Capitalised spans + known entity names found in the question (see the module docstring)."""

    def __init__(self, max_mentions: PositiveInt = 8, min_known_length: NonNegativeInt = 3) -> None:
        super().__init__()
        self.max_mentions = max_mentions
        self.min_known_length = min_known_length

    def detect(self, item: MentionIn) -> tuple[str, ...]:
        question = item.question
        found: list[tuple[int, str]] = []
        for match in _CAPITALISED_RUN.finditer(question):
            words = match.group().split()
            while words and words[0].lower() in _OPENERS:
                words = words[1:]
            if words:
                span = " ".join(words)
                found.append((question.find(span, match.start()), _POSSESSIVE.sub("", span)))
        lowered = question.lower()
        for name in item.known_entities:
            name = " ".join(name.split())
            if len(name) < self.min_known_length:
                continue
            match = re.search(rf"(?<!\w){re.escape(name.lower())}(?!\w)", lowered)
            if match:
                found.append((match.start(), question[match.start():match.end()]))
        found.sort(key=lambda p: p[0])
        return dedupe([span for _, span in found], self.max_mentions)

    def forward(self, batch: list[MentionIn]) -> list[MentionOut]:
        return [MentionOut(self.detect(item)) for item in batch]
