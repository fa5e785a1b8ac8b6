"""What a pipeline or a judge reports about its own LLM use: one typed snapshot.

``Pipeline.llm_usage()`` and ``Judge.llm_usage()`` return a ``Usage``; the runner reads these and
nothing else (it does not look for meters, stages or failure lists on the objects it runs):

* ``total``: the ``UsageMeter.snapshot()`` counters summed over the distinct LMs (calls, uncached
  calls, tokens, model seconds);
* ``stages``: each prompted stage's own counters, by its dotted name (where the cost goes: MAGMA's
  slow path is its ``event_extractor`` and ``consolidator``);
* ``failures``: the unusable LLM outputs so far (``memlab.stage.Failure``, each naming its stage).

Counters only grow and failures are only appended, so a phase's use (a build, a batch of
questions) is ``after.since(before)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memlab.lm.base import UsageMeter

if TYPE_CHECKING:
    from memlab.lm.base import LM
    from memlab.stage import Failure


def _no_calls() -> dict[str, float]:
    return UsageMeter().snapshot()


@dataclass(frozen=True)
class Usage:
    """LLM use at one moment, or between two (module docstring)."""

    total: Mapping[str, float] = field(default_factory=_no_calls)
    stages: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    failures: tuple[Failure, ...] = ()

    @classmethod
    def of(cls, lms: Iterable[LM], stages: Mapping[str, Mapping[str, float]] | None = None,
           failures: Iterable[Failure] = ()) -> Usage:
        """The counters of ``lms`` summed, with the stages' own and the ``failures``."""
        total: dict[str, float] = {}
        for lm in lms:
            for key, value in lm.usage.snapshot().items():
                total[key] = total.get(key, 0) + value
        return cls(total or _no_calls(), dict(stages or {}), tuple(failures))

    def since(self, before: Usage) -> Usage:
        """The use between ``before`` and this snapshot."""
        stages = {name: UsageMeter.diff(now, before.stages.get(name, {})) for name, now in self.stages.items()}
        seen = {id(failure) for failure in before.failures}
        return Usage(UsageMeter.diff(dict(self.total), dict(before.total)), stages,
                     tuple(failure for failure in self.failures if id(failure) not in seen))

    def failure_counts(self) -> dict[str, int]:
        """The failed calls by stage."""
        return dict(Counter(failure.stage for failure in self.failures))
