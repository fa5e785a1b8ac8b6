"""``CacheOnlyLM``: another LM's cached replies, and an error instead of a model call.

Training recipes read what a prompted stage answered on their conversations (the teacher's
labels) by running the stage again on this LM: every request the teacher was asked is a cache
hit under the wrapped LM's identity, so the replies are the ones the run saw, and a request it
was never asked raises ``CacheMissError`` rather than loading a model for hours. The wrapped
LM's ``name`` keys the cache; its model is never loaded.
"""

from __future__ import annotations

from memlab.lm.base import LM
from memlab.lm.errors import LMError
from memlab.lm.types import ChatRequest, Completion


class CacheMissError(LMError):
    """A request the response cache does not hold (``CacheOnlyLM`` never calls a model)."""


class CacheOnlyLM(LM):
    """The cached completions of ``lm`` (same cache, same identity); a miss is ``CacheMissError``."""

    def __init__(self, lm: LM) -> None:
        super().__init__(cache=lm.cache_path)
        self.lm = lm

    @property
    def name(self) -> str:
        return self.lm.name

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        raise CacheMissError(f"{len(requests)} request(s) to {self.name} are not in the response cache "
                             f"({self.lm.cache_path}); CacheOnlyLM never calls the model")


def live_stages(owner: object, names: tuple[str, ...] | list[str]) -> list[str]:
    """The names among ``names`` of ``owner``'s stages whose LM could call a model (an LM that is
    not a ``CacheOnlyLM``); absent and LM-less stages are not live. What a replaying recipe or
    evaluator refuses before it builds anything."""
    return [name for name in names
            if isinstance(lm := getattr(getattr(owner, name, None), "lm", None), LM) and not isinstance(lm, CacheOnlyLM)]
