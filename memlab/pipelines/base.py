"""Pipelines: plain Python control flow over named stages.

Contract
--------
* A pipeline is an ``nn.Module`` holding its stages as named attributes (so ``.to()``,
  ``state_dict()`` and ``named_modules()`` see them). ``named_stages()`` enumerates every
  stage (dotted names for nested ones) and ``replace(name, stage)`` swaps one in place: this
  is how a trained stage replaces a prompted one, from a config override or from code.
* ``build(history) -> memory`` builds the pipeline's memory from one conversation's
  ``History`` (``Conversation.history()``: the sessions, no questions; anything else is a
  ``TypeError``, so no build can read the gold questions). The memory object is returned and
  passed back explicitly; a pipeline keeps no per-conversation state of its own.
* ``retrieve(memory, query) -> list[Retrieved]`` ranks memory units for a query, best first,
  without answering (``memlab run --retrieval-only``; evidence recall@k is computed on it).
  It returns at least ``RECALL_DEPTH`` units when memory has that many, even if the answerer
  is given fewer, so recall@20 is defined for every pipeline.
* ``answer(memory, query) -> Answer`` answers; ``Answer.retrieved`` is the ranking it used and
  ``Answer.context`` the text given to the answering model.
* ``retrieve_many`` / ``answer_many`` do the same for a batch of queries on one memory, one
  result per query, in order; the runner calls these. By default they loop over
  ``retrieve`` / ``answer``; a pipeline whose stages batch (a neural reranker, a served LM)
  overrides them so each stage sees the whole batch, and defines the single-query methods as
  a batch of one.
* A pipeline only ever sees a ``Query`` (text and date): never a gold answer, a gold category
  or gold evidence.
* ``build`` returns a ``memlab.memory.base.Memory``. ``memory_stats(memory)`` is what the runner
  records about it in ``metrics.json``: the memory's own ``stats()`` and its ``structure`` block,
  ``memory_structure(memory)``, the shape of what formed, from the memory alone with no model call
  (``memlab.memory.structure``; ``degenerate`` lists what did not form). The memory's
  ``structure()`` by default; a pipeline overrides ``memory_structure`` to add what only it knows.
* ``search_statistics(traces)`` summarises how the search went over a run's answered questions
  (each one's ``Answer.trace.steps``) for ``metrics.json["search"]``; {} where a pipeline has
  nothing to report (CompassMem gives its appendix Table 4 statistics).
* ``build_reached()`` says how far the build running now has got, ``{"turns": added, "of": total}``,
  read from another thread for the run's progress while a build of hours runs; None where a
  pipeline does not say (its builds report their cost alone).
* ``release(memory)`` is called once the memory's questions are answered; a memory that still
  works in the background (MAGMA's consolidation worker) finishes and stops there.
* ``save_memory(memory, folder)`` / ``load_memory(folder)`` write a built memory through the
  store (atomic, versioned, checked on load) and read it back, so that a run can answer from
  a memory built earlier (``memlab run --save-memory`` / ``--memory``). ``query_settings``
  names the constructor arguments that only matter when answering: a saved memory serves any
  configuration that differs from its builder's in those alone. Where a query setting also
  decides what ``build`` makes (Mnemis builds no graph for an episodes-only search),
  ``built_parts()`` names those parts, and they are recorded with the build configuration.
* Stages that call an LM take it injected; ``lms()`` lists the distinct LMs (the run records
  where they ran and frees them), and ``llm_usage()`` is the pipeline's LLM use so far
  (``memlab.telemetry.Usage``: totals, each prompted stage's own, the failed calls), the one thing
  the runner reads to account for a build or a batch of questions.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Callable, Iterator

from torch import nn

from memlab.components import CheckedArguments
from memlab.dates import format_day
from memlab.lm.base import LM
from memlab.memory.base import Memory
from memlab.stage import Failure, PromptedStage, Stage
from memlab.telemetry import Usage
from memlab.types import Answer, History, MemoryUnit, Query, Retrieved

#: Minimum ranking depth ``retrieve`` returns (the deepest recall@k the runner reports).
RECALL_DEPTH = 20
_MISSING = object()


def _history_only(build: Callable[..., Any]) -> Callable[..., Any]:
    """``build`` refusing anything but a ``History``: a ``Conversation`` carries the gold questions."""
    if getattr(build, "history_only", False):
        return build

    @functools.wraps(build)
    def checked(self: "Pipeline", history: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(history, History):
            raise TypeError(f"{type(self).__name__}.build takes a History (Conversation.history()), "
                            f"not {type(history).__name__}: a pipeline must not see the gold questions")
        return build(self, history, *args, **kwargs)

    checked.history_only = True  # type: ignore[attr-defined]
    return checked


class Pipeline(CheckedArguments, nn.Module):
    """Base class of memory pipelines; the contract is in this module's docstring."""

    #: Constructor arguments that do not change what ``build`` makes (module docstring).
    query_settings: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "build" in cls.__dict__:
            cls.build = _history_only(cls.__dict__["build"])

    def build(self, history: History) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def built_parts(self) -> dict[str, bool]:
        """The parts of a memory that ``build`` makes or skips by a query setting (module docstring);
        none by default."""
        return {}

    def retrieve(self, memory: Any, query: Query) -> list[Retrieved]:  # pragma: no cover - abstract
        raise NotImplementedError

    def answer(self, memory: Any, query: Query) -> Answer:  # pragma: no cover - abstract
        raise NotImplementedError

    def retrieve_many(self, memory: Any, queries: list[Query]) -> list[list[Retrieved]]:
        return [self.retrieve(memory, query) for query in queries]

    def answer_many(self, memory: Any, queries: list[Query]) -> list[Answer]:
        return [self.answer(memory, query) for query in queries]

    def memory_stats(self, memory: Memory) -> dict[str, Any]:
        """Facts about a built memory for the run's output, its ``structure`` among them (contract above)."""
        structure = self.memory_structure(memory)
        return {**memory.stats(), **({"structure": structure} if structure else {})}

    def memory_structure(self, memory: Memory) -> dict[str, Any]:
        """The shape of what formed in ``memory`` (contract above)."""
        return memory.structure()

    def search_statistics(self, traces: list[list[dict[str, Any]]]) -> dict[str, Any]:
        """How the search went over the answered questions' ``traces`` (contract above); {} by default."""
        return {}

    def build_reached(self) -> dict[str, int] | None:
        """How far the build running now has got (contract above); None: not said."""
        return None

    def release(self, memory: Any) -> None:
        """Done with ``memory`` (contract above); nothing to do for memories without background work."""

    def save_memory(self, memory: Any, folder: Path) -> None:
        """Write ``memory`` into ``folder`` (contract above); memories that save themselves do."""
        memory.save(folder)

    def load_memory(self, folder: Path) -> Any:  # pragma: no cover - abstract
        """A memory written by ``save_memory``, checked on load (``MemoryStoreError`` when it cannot be used)."""
        raise NotImplementedError(f"{type(self).__name__} cannot load saved memories")

    def named_stages(self) -> Iterator[tuple[str, Stage]]:
        for name, module in self.named_modules():
            if name and isinstance(module, Stage):
                yield name, module

    def replace(self, name: str, stage: Stage) -> Stage:
        """Swap the stage at dotted ``name`` for ``stage``; returns the old one."""
        parent_name, _, attr = name.rpartition(".")
        parent = self.get_submodule(parent_name) if parent_name else self
        old = getattr(parent, attr, _MISSING)
        if old is _MISSING or not (old is None or isinstance(old, Stage)):
            raise KeyError(f"{type(self).__name__} has no stage slot {name!r}; "
                           f"stages: {[n for n, _ in self.named_stages()]}")
        if not isinstance(stage, Stage):
            raise TypeError(f"replacement for {name!r} must be a Stage, got {type(stage).__name__}")
        if old is not None and getattr(old, "In", None) is not getattr(stage, "In", None):
            raise TypeError(f"{name!r} takes {old.In.__name__}; {type(stage).__name__} does not")
        setattr(parent, attr, stage)
        return old

    def lms(self) -> list[LM]:
        """Distinct LMs injected into this pipeline's stages (and into the pipeline itself)."""
        found: dict[int, LM] = {}
        for module in self.modules():
            for value in vars(module).values():
                if isinstance(value, LM):
                    found.setdefault(id(value), value)
        return list(found.values())

    def llm_usage(self) -> Usage:
        """This pipeline's LLM use so far (contract above)."""
        stages = {name: stage.usage.snapshot() for name, stage in self.named_stages()
                  if isinstance(stage, PromptedStage)}
        return Usage.of(self.lms(), stages, self._failed_calls())

    def _failed_calls(self) -> list[Failure]:
        """The unusable LLM outputs so far: the prompted stages'; a pipeline that calls a model
        outside its stages (a peer library) adds its own."""
        return [f for _, stage in self.named_stages() if isinstance(stage, PromptedStage) for f in stage.failures]


def extends_signature(base: type) -> Callable[[Callable], Callable]:
    """For a variant's ``__init__(self, *, own..., **shared)`` that passes ``shared`` on to
    ``base``: its signature becomes ``base``'s arguments (keyword-only) plus its own, so the
    base's arguments are declared once and config validation still sees every name."""

    def decorate(init: Callable) -> Callable:
        own = inspect.signature(init).parameters
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        inherited = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                     for name, p in list(inspect.signature(base.__init__).parameters.items())[1:]
                     if name not in own and p.kind not in variadic]
        params = list(own.values())
        mine = [p for p in params[1:] if p.kind is inspect.Parameter.KEYWORD_ONLY]
        init.__signature__ = inspect.Signature([params[0], *inherited, *mine])  # type: ignore[attr-defined]
        return init

    return decorate


def render_units(units: list[MemoryUnit]) -> str:
    """Units as the answerer sees them: one block per unit, in the order given."""
    return "\n".join(unit.text for unit in units)


def dated_text(unit: MemoryUnit) -> str:
    """A unit as an answerer reads it: ``[7 May 2023] text`` (its text alone when undated)."""
    return f"[{format_day(unit.timestamp)}] {unit.text}" if unit.timestamp else unit.text
