"""The base of built memories: what a memory says about itself, with no model call.

A pipeline's ``build`` returns a ``Memory`` (``memlab.pipelines.base``). The runner records, for
each built memory, ``stats()`` (its unit counts, a consolidation backlog, background steps that
failed ...) and ``structure()``: the shape of what formed (``memlab.memory.structure``), whose
``degenerate`` names what did not. Both are plain JSON-serialisable dicts, empty where a memory has
nothing to say.
"""

from __future__ import annotations

from typing import Any


class Memory:
    """Base class of built memories; the contract is in this module's docstring."""

    def stats(self) -> dict[str, Any]:
        return {}

    def structure(self) -> dict[str, Any]:
        return {}
