"""A response cache that reads a shared cache and writes beside it: one per worker of a parallel run.

A worker of ``memlab run --workers N`` (``memlab.eval.workers``) must not write the run's
response cache while other workers read it (one SQLite writer at a time, and on a Ray cluster
the file is on another machine), yet it should replay every call that cache already holds.
``AsideCache`` does both: ``get`` looks in its own file first, then in the shared cache;
``put`` writes its own file only. The run merges the own file into the shared cache when the
worker's task is done (``ResponseCache.merge_rows``: a stored row is never replaced, and a
differing one is counted). An unfinished task's own file stays, so a rerun replays it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from memlab.lm.cache import ResponseCache
from memlab.lm.types import ChatRequest, Completion


class AsideCache:
    """Reads ``own`` then ``shared`` (None: no shared cache reachable); writes ``own``."""

    def __init__(self, own: ResponseCache, shared: ResponseCache | None) -> None:
        self.own = own
        self.shared = shared

    @property
    def path(self):
        return self.own.path

    def get(self, model: str, request: ChatRequest) -> Completion | None:
        hit = self.own.get(model, request)
        if hit is None and self.shared is not None:
            hit = self.shared.get(model, request)
        return hit

    def put(self, model: str, request: ChatRequest, completion: Completion) -> None:
        self.own.put(model, request, completion)

    def rows(self) -> Iterator[dict[str, Any]]:
        """The rows this worker wrote (``ResponseCache.rows``), for the merge."""
        return self.own.rows()

    def __repr__(self) -> str:
        return f"AsideCache(own={self.own!r}, shared={self.shared!r})"
