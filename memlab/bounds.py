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
    """Bounds, inclusive unless ``open_min`` / ``open_max``; ``None`` leaves that side unbounded."""

    min: float | None = None
    max: float | None = None
    open_min: bool = False
    open_max: bool = False

    def problem(self, value: float) -> str | None:
        """Why ``value`` is out of range (``"must be >= 1"``, ``"must be in (0, 1]"``), or None."""
        below = self.min is not None and (value <= self.min if self.open_min else value < self.min)
        above = self.max is not None and (value >= self.max if self.open_max else value > self.max)
        if not (below or above):
            return None
        if self.min is not None and self.max is not None:
            return f"must be in {'(' if self.open_min else '['}{self.min}, {self.max}{')' if self.open_max else ']'}"
        if below:
            return f"must be {'>' if self.open_min else '>='} {self.min}"
        return f"must be {'<' if self.open_max else '<='} {self.max}"


PositiveInt = Annotated[int, Range(min=1)]
NonNegativeInt = Annotated[int, Range(min=0)]
NonNegativeFloat = Annotated[float, Range(min=0)]
#: A probability, similarity threshold, damping factor ...: in [0, 1].
UnitFloat = Annotated[float, Range(0, 1)]
#: A rate, temperature or scale that must be above zero.
PositiveFloat = Annotated[float, Range(min=0, open_min=True)]
#: A probability or factor strictly between 0 and 1 (a damping factor).
OpenUnitFloat = Annotated[float, Range(0, 1, open_min=True, open_max=True)]
