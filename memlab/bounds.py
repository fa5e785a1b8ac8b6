"""Declared ranges of constructor arguments, checked when a config is validated.

A numeric argument with a valid range says so in its annotation, ``top_k: PositiveInt = 5`` or
``Annotated[float, Range(0, 1)]``; ``memlab.config.validate`` refuses a value out of range (and
any value of the wrong type) before anything is built, so the range is stated once, where the
argument is declared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated


@dataclass(frozen=True)
class Range:
    """Inclusive bounds; ``None`` leaves that side open."""

    min: float | None = None
    max: float | None = None

    def problem(self, value: float) -> str | None:
        """Why ``value`` is out of range (``"must be >= 1"``), or None."""
        if self.min is not None and self.max is not None and not self.min <= value <= self.max:
            return f"must be in [{self.min}, {self.max}]"
        if self.min is not None and value < self.min:
            return f"must be >= {self.min}"
        if self.max is not None and value > self.max:
            return f"must be <= {self.max}"
        return None


PositiveInt = Annotated[int, Range(min=1)]
NonNegativeInt = Annotated[int, Range(min=0)]
NonNegativeFloat = Annotated[float, Range(min=0)]
#: A probability, similarity threshold, damping factor ...: in [0, 1].
UnitFloat = Annotated[float, Range(0, 1)]
