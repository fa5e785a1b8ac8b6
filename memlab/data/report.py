"""What a loader read and which quirks of the source data it handled on the way."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

#: Examples kept per quirk (the counts are always complete).
MAX_EXAMPLES = 5


@dataclass
class LoadReport:
    """Counts of what was loaded, plus every quirk met, counted by name with a few examples.

    ``quirks`` keys are the names documented by each loader (``memlab.data.locomo``,
    ``memlab.data.longmemeval``), e.g. ``"evidence_repaired"`` or ``"date_without_session"``.
    ``examples[quirk]`` holds the first ``MAX_EXAMPLES`` occurrences, each naming where it was
    met ("conv-43:q18 'D:11:26' -> D11:26").
    """

    source: str
    format: str
    conversations: int = 0
    sessions: int = 0
    turns: int = 0
    images: int = 0
    questions: Counter[str] = field(default_factory=Counter)
    quirks: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def note(self, quirk: str, example: str) -> None:
        """Count one occurrence of ``quirk``, keeping ``example`` if few are kept yet."""
        self.quirks[quirk] += 1
        kept = self.examples.setdefault(quirk, [])
        if len(kept) < MAX_EXAMPLES:
            kept.append(example)

    @property
    def total_questions(self) -> int:
        return sum(self.questions.values())

    def summary(self) -> str:
        """One line: what was loaded and how many of each quirk were handled."""
        categories = ", ".join(f"{name} {n}" for name, n in sorted(self.questions.items()))
        line = (
            f"{self.source} ({self.format}): {self.conversations} conversations, "
            f"{self.sessions} sessions, {self.turns} turns, {self.total_questions} questions "
            f"({categories or 'none'})"
        )
        if self.quirks:
            line += "; handled: " + ", ".join(f"{name} {n}" for name, n in sorted(self.quirks.items()))
        return line
