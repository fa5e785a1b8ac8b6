"""The one error every loader raises for bad input."""

from __future__ import annotations

from os import PathLike

from memlab.errors import MemlabError


class DataError(MemlabError, ValueError):
    """A data file that cannot be loaded: missing, not JSON, or not the expected structure.

    The message always starts with the file, then says what is wrong and where, e.g.
    ``locomo10.json: conversation 3 (conv-41): session_4 has no date``.
    """

    def __init__(self, source: str | PathLike[str], problem: str) -> None:
        self.source = str(source)
        self.problem = problem
        super().__init__(f"{self.source}: {problem}")
