"""Arguments family: EDU texts -> each one's event type and role-argument pairs (EMem 3.2).

One input item is a *batch of EDUs* (``ArgumentIn.edus``) so a prompted implementation makes
one call for several EDUs; the output has one ``EventFrame`` per EDU, in order. Roles are
free strings (no ontology); the arguments become nodes of the memory graph.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlab.stage import Stage


@dataclass(frozen=True)
class EventFrame:
    event_type: str
    #: (role, argument) pairs, arguments as written in the EDU.
    arguments: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ArgumentIn:
    edus: tuple[str, ...]


@dataclass(frozen=True)
class ArgumentOut:
    frames: tuple[EventFrame, ...]
    error: str | None = None


class ArgumentExtractor(Stage[ArgumentIn, ArgumentOut]):
    """Base class of the arguments family (``In = ArgumentIn``, ``Out = ArgumentOut``)."""

    In = ArgumentIn
    Out = ArgumentOut


def normalize_argument(text: str) -> str:
    """The key under which two spellings of an argument are one node (case and spaces folded)."""
    return " ".join(text.lower().strip(" .,;:'\"").split())
