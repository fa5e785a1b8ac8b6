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
  ``failures`` and recorded, and the run goes on. No bad completion crashes a benchmark. A
  reply that reads well but breaks a rule its family states (``RuleBrokenError``: a category
  over the whole batch) goes the same way, its retry naming the rule, and every such reply is
  counted in ``rejected_replies``.
* **Trainable stages** are ordinary ``nn.Module``s with parameters; they add what training
  needs (``featurize``, ``loss`` ...) as their family requires.
* **Serialisation.** ``save(dir)`` writes ``config.json`` (class path + the JSON-serialisable
  init kwargs, recorded automatically), ``model.safetensors`` (``checkpoint_state()``, when
  there is one) and, last, ``manifest.json`` (``memlab.fileio``'s, as memory folders have: format
  ``memlab.Stage`` and its version, package versions, the sha256 of every file, ``trained_on``);
  ``Stage.load(dir, **collaborators)`` rebuilds it. The folder is
  written to a temporary sibling and swapped in (``memlab.fileio.atomic_folder``), so a crash
  never leaves half a checkpoint. ``load`` checks the manifest before reading anything (a
  listed file missing, a directory, another sha256, another format version) and refuses
  weights that are not all finite, or absent where the stage has weights to load: each a
  ``StageError`` naming the folder and the problem (the files and their checks live in
  ``memlab.checkpoint``). A folder without a manifest (saved before checkpoints had one) is
  refused; ``seal_checkpoint(dir)`` gives it one. Package versions
  other than the saved ones are only logged. Stage classes live in the ``memlab`` package, never in a
  script's ``__main__``. ``checkpoint_state()`` is the full state dict by default; a stage whose construction
  rebuilds part of its weights (a frozen packaged base under a LoRA adapter) returns only
  what differs, and loading checks that every saved key lands on a parameter and that
  nothing ``checkpoint_state()`` names is missing. ``load_stage(path)`` is the same load as
  a function, so a config node ``{_component_: memlab.stage.load_stage, path: ...}`` puts a
  checkpoint into any slot.
* **Provenance.** A recipe writes ``training.json`` into the checkpoint (its ``split``);
  a loaded stage's ``trained_on`` holds the conversations it was trained or validated on
  (that split, plus those the manifest carried over from an earlier save), and
  ``trained_conversations(module)`` collects them from any module holding stages, so an
  evaluation can refuse to score a stage on its own training data.
* **What is saved.** A saved folder says what a stage *is*, never where it runs: the runtime
  ``device`` argument is neither saved nor read back (``RUNTIME_ARGUMENTS``; the class default
  applies, or ``Stage.load(dir, device="cuda")``). Collaborators that are neither JSON nor
  stages (``lm``, ``embedder``) are not saved either; the caller passes them to ``load``.
* **Composite stages** (a constructor argument that is itself a stage: ``OrderFusionReranker(reranker=...)``,
  ``RoutedPlanner(router=...)``) save as a tree, like sentence-transformers' ``modules.json``::

      <dir>/config.json          {"class": ..., "kwargs": {...}, "stages": {"reranker": "reranker"}}
      <dir>/model.safetensors    the parent's own tensors only (absent when it has none)
      <dir>/manifest.json        sha256 of every file of the tree, the child's included
      <dir>/reranker/            the child, saved whole (config.json, weights, extras, manifest.json;
                                 its own children nested the same way)

  ``stages`` maps the argument to its sub-folder. Each node stores only its own tensors: the
  parent's ``checkpoint_state()`` less every key under a child stage's module prefix, which
  the child's folder holds; loading a parent's weights checks them against that same own
  part, so a child tensor in the parent's file is refused as unexpected. ``load`` rebuilds the
  children first and passes them in; every node of the tree gets those of the caller's
  collaborators that its signature takes (a collaborator nothing in the tree takes is an
  error at the root, as for a single stage), and a caller's stage given for a child's
  argument replaces the saved child. The root's manifest checks the whole tree; a child
  folder loaded on its own is checked by its own manifest.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, ClassVar, Generic, TypeVar

import torch
from torch import nn

# StageError and seal_checkpoint are part of this module's API; their home is memlab.checkpoint.
from memlab.checkpoint import (
    CONFIG_FILE,
    FORMAT,
    FORMAT_VERSION,
    RECORDED_PACKAGES,
    TRAINING_FILE,
    WEIGHTS_FILE,
    StageError,
    changed_versions,
    checked_manifest,
    non_finite,
    read_weights,
    training_split,
)
from memlab.checkpoint import seal_checkpoint as seal_checkpoint  # re-exported
from memlab.components import checked_init, import_memlab_class, mismatch, parameters
from memlab.fileio import atomic_folder, is_subfolder_name, write_manifest
from memlab.lm.base import LM, UsageMeter
from memlab.lm.errors import ParseError, RequestError, RuleBrokenError
from memlab.lm.types import ChatRequest, Completion
from memlab.versions import package_versions

log = logging.getLogger(__name__)

In = TypeVar("In")
Out = TypeVar("Out")


#: Constructor arguments that say where a stage runs, not what it is: never saved nor loaded.
RUNTIME_ARGUMENTS = frozenset({"device"})
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
    #: Replies refused for breaking a rule of the stage (``PromptedStage``; a stage that asks no
    #: model refuses none). A pipeline reports the count in its memory's structure.
    rejected_replies: int = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:  # arguments checked as every component's are, then recorded
            cls.__init__ = _recording_init(checked_init(cls.__dict__["__init__"]))  # type: ignore[method-assign]

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

    @property
    def trained_on(self) -> frozenset[str]:
        """Ids of the conversations this stage was trained or validated on, as the checkpoint it
        was loaded from records them (module docstring, "Provenance"); empty for a stage built in
        code or loaded from an untrained one. Read-only; a save carries it over."""
        return self.__dict__.get("_trained_on", frozenset())

    @property
    def loaded_from(self) -> Path | None:
        """The folder this stage was loaded from (None: built in code)."""
        return self.__dict__.get("_loaded_from")

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

    def set_setting(self, name: str, value: Any) -> None:
        """Change the constructor setting ``name`` after construction (a decision threshold
        calibrated after training): the attribute of that name and what ``save`` records."""
        if name not in getattr(self, "_init_kwargs", {}) or not hasattr(self, name):
            raise StageError(f"{type(self).__name__}: {name!r} is no constructor setting kept as an attribute")
        setattr(self, name, value)
        self._init_kwargs[name] = value

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
        (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2))
        state = {k: v.detach().cpu().contiguous() for k, v in self._own(self.checkpoint_state()).items()}
        bad = non_finite(state)
        if bad:  # a diverged stage: load would refuse the checkpoint, so never write one
            raise StageError(f"{type(self).__name__}: refusing to save non-finite weights (NaN or inf) in {bad[:5]}")
        if state:
            from safetensors.torch import save_file

            save_file(state, str(folder / WEIGHTS_FILE))
        self._save_extra(folder)
        # Last, over every file written above (children's folders included).
        write_manifest(folder, FORMAT, FORMAT_VERSION, package_versions(RECORDED_PACKAGES),
                       trained_on=sorted(self.trained_on))

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
        own = self._own(self.state_dict())
        unexpected = sorted(set(state) - set(own))
        missing = sorted(set(self._own(self.checkpoint_state())) - set(state))
        if missing and not state:  # else the stage would run on its untrained initial weights
            raise StageError(f"{directory}: no {WEIGHTS_FILE}, but {type(self).__name__} has weights to load "
                             f"({missing[:5]})")
        if missing or unexpected:
            raise StageError(f"{directory}: weights do not match {type(self).__name__} "
                             f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
        shapes = [f"{k} {tuple(v.shape)} != {tuple(own[k].shape)}" for k, v in state.items() if v.shape != own[k].shape]
        if shapes:  # checked here: load_state_dict's own message spans many lines
            raise StageError(f"{directory}: weights do not match {type(self).__name__} (shapes {shapes[:5]})")
        if state:
            self.load_state_dict(state, strict=False)

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


def saved_stage_class(node: dict[str, Any]) -> type | None:
    """The class a ``load_stage`` config node rebuilds, read from its checkpoint's
    ``config.json`` (never its weights), so validation can check it against its slot; None when
    it cannot be read here (loading reports why)."""
    path = node.get("path")
    if not isinstance(path, (str, os.PathLike)):
        return None
    try:
        saved = json.loads((Path(path).expanduser() / CONFIG_FILE).read_text())
        return import_memlab_class(saved["class"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


load_stage.builds = saved_stage_class  # type: ignore[attr-defined]


def _check_saved_arguments(cls: type, saved: dict[str, Any], config_path: Path) -> None:
    """The saved arguments against the constructor's annotations, types included, as a config's
    values are checked (``memlab.components.mismatch``): a checkpoint edited or re-sealed by hand
    is refused when it loads, not at its first use."""
    declared, _ = parameters(cls)
    for name, value in saved.items():
        problem = mismatch(value, (declared or {}).get(name, (False, None))[1])
        if problem is not None:
            raise StageError(f"{config_path}: saved argument {name} of {cls.__name__} {problem}, got {value!r}")


def _load_tree(directory: Path, collaborators: dict[str, Any], strict: bool,
               checked: bool = False) -> tuple[Stage, set[str]]:
    """Rebuild the stage saved in ``directory``, its child stages first, and name the
    collaborators the tree took. A node is given those its signature takes; with ``strict``
    (the root of ``Stage.load``) also those no node took, so that binding reports them.
    ``checked``: the root's manifest has already checked this node's files."""
    config_path = directory / CONFIG_FILE
    manifest = checked_manifest(directory, check_files=not checked)
    changed = [] if checked else changed_versions(manifest)
    if changed:
        log.info("%s: saved with other package versions (%s)", directory, ", ".join(changed))
    try:
        config = json.loads(config_path.read_text())
        cls = import_memlab_class(config["class"])  # a ComponentError is a ValueError
        kwargs = {k: v for k, v in dict(config.get("kwargs", {})).items() if k not in RUNTIME_ARGUMENTS}
        children = dict(config.get("stages", {}))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise StageError(f"{config_path}: malformed stage config ({e})") from None
    if not (isinstance(cls, type) and issubclass(cls, Stage)):
        raise StageError(f"{config_path}: {config['class']} is not a Stage")
    _check_saved_arguments(cls, kwargs, config_path)
    parameters = inspect.signature(cls).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    used: set[str] = set()
    for name, folder in children.items():
        if not is_subfolder_name(folder):
            raise StageError(f"{config_path}: child stage {name!r} is not in a sub-folder ({folder!r})")
        if name in collaborators:
            continue  # the caller's stage replaces the saved one
        kwargs[name], child_used = _load_tree(directory / folder, collaborators, strict=False, checked=True)
        used |= child_used
    own = {k: v for k, v in collaborators.items() if takes_any or k in parameters or (strict and k not in used)}
    arguments = {**kwargs, **own}
    try:
        inspect.signature(cls).bind(**arguments)
    except TypeError as e:
        raise StageError(f"{directory}: cannot rebuild {cls.__name__} from its saved arguments and "
                         f"{sorted(collaborators) or 'no collaborators'}: {e}") from None
    try:
        stage = cls(**arguments)
    except (TypeError, ValueError) as e:  # saved arguments of the wrong type or value
        raise StageError(f"{directory}: cannot rebuild {cls.__name__} from its saved arguments: "
                         f"{type(e).__name__}: {e}") from e
    weights = directory / WEIGHTS_FILE
    stage._load_state(read_weights(weights) if weights.exists() else {}, directory)
    stage._load_extra(directory)
    trained_on = frozenset(manifest.get("trained_on", ())) | training_split(directory)
    object.__setattr__(stage, "_trained_on", trained_on)  # read-only properties of the stage
    object.__setattr__(stage, "_loaded_from", directory)
    if not checked:  # a root: its record covers the whole tree
        recorded = bool(trained_on) or (directory / TRAINING_FILE).exists()
        weights = any(PurePosixPath(name).name == WEIGHTS_FILE for name in manifest.get("files", {}))
        object.__setattr__(stage, "_unrecorded_weights", weights and not recorded)
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

    One bad reply costs only its own call, never the batch or the run: whatever ``parse``
    raises on a completion (a ``ParseError``, or any other exception of a parser meeting an
    odd reply, which is logged) makes that completion unusable: it is retried once, and then
    the output is the salvage or ``fallback`` and the failure is counted in ``failures``. A
    request the backend refuses on its own (``RequestError``: HTTP 400, a prompt too long) is
    counted and falls back at once, as a retry would be refused too. ``parse`` must return
    well-typed output (strings where the family says strings ...): code after it trusts it.
    Errors of the backend as a whole (``LMUnavailableError``, a busy cache) still propagate.
    """

    #: A template for the retry, rendered with ``render_prompt`` as a fresh call (None: the
    #: follow-up below). Stages that take a ``retry_prompt`` argument set it.
    retry_prompt: Any = None

    #: Message appended when a completion cannot be parsed, for the single retry.
    RETRY_MESSAGE = (
        "Your previous reply could not be parsed ({error}). Reply again with only the "
        "requested output, in the requested format."
    )
    #: Message appended when a completion breaks a rule of the stage (``RuleBrokenError``).
    RULE_MESSAGE = "Your previous reply breaks a rule: {error}. Reply again, following the rules, in the same format."

    def __init__(self, lm: LM, max_tokens: int = 256, temperature: float = 0.0) -> None:
        super().__init__()
        self.lm = lm
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.failures: list[Failure] = []
        #: Replies refused for breaking a rule of the stage (``RuleBrokenError``), retries included.
        self.rejected_replies = 0
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

    def _generate(self, requests: list[ChatRequest]) -> list[Completion | RequestError]:
        """The completions of ``requests``, in order; a request the backend refused gets its
        ``RequestError`` in its place (the batch is asked again one request at a time to find it)."""
        try:
            completions = self.lm.generate(requests)
        except RequestError as e:
            if len(requests) == 1:
                return [e]
            return [reply for request in requests for reply in self._generate([request])]
        for completion in completions:
            self.usage.record(completion)
        return completions

    def _read(self, reply: Completion | RequestError, item: In) -> tuple[Out | None, ParseError | None]:
        """``(parse(reply), None)``, or ``(None, error)`` when the reply is unusable."""
        if isinstance(reply, RequestError):
            return None, ParseError(f"the request failed: {reply}")
        try:
            return self.parse(reply.text, item), None
        except ParseError as e:
            self.rejected_replies += isinstance(e, RuleBrokenError)
            return None, e
        except Exception as e:  # a parser bug met by an odd reply: that reply's failure only
            log.warning("%s: parse raised %s on a completion; treated as unusable", type(self).__name__,
                        type(e).__name__, exc_info=True)
            return None, ParseError(f"{type(e).__name__}: {e}")

    def _failed(self, item: In, error: ParseError, completion: str, salvage: Any = None) -> Out:
        """The output of a call that failed for good (counted): the salvage, else the fallback."""
        failure = Failure(stage=type(self).__name__, error=str(error), completion=completion[:500])
        self.failures.append(failure)
        salvage = error.salvage if error.salvage is not None else salvage
        log.warning("%s: no usable completion: %s%s", failure.stage, failure.error,
                    "" if salvage is None else " (kept what could be salvaged)")
        return salvage if salvage is not None else self.fallback(item, str(error))

    def retry_request(self, item: In, request: ChatRequest, reply: str, error: ParseError) -> ChatRequest:
        """The one retry after ``reply`` to ``request`` failed to parse: a fresh call on the
        stage's ``retry_prompt`` when it has one (``render_prompt``), else the same conversation
        with the reply and a follow-up naming the ``error`` (the rule, for a ``RuleBrokenError``)."""
        if self.retry_prompt is not None:
            return self.render_prompt(self.retry_prompt, item)
        message = self.RULE_MESSAGE if isinstance(error, RuleBrokenError) else self.RETRY_MESSAGE
        messages = list(request.messages) + [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": message.format(error=error)},
        ]
        return ChatRequest(**{**request.__dict__, "messages": tuple(messages)})

    def request(self, messages: list[dict[str, str]] | str, **params: Any) -> ChatRequest:
        """A request with this stage's sampling defaults."""
        params.setdefault("max_tokens", self.max_tokens)
        params.setdefault("temperature", self.temperature)
        return ChatRequest.of(messages, **params)

    def forward_where(self, batch: list[In], ask: Callable[[In], bool], empty: Callable[[In], Out]) -> list[Out]:
        """``forward`` on the items ``ask`` accepts; the others get ``empty(item)`` and cost no
        call (an episode with no entities has nothing to describe)."""
        asked = [i for i, item in enumerate(batch) if ask(item)]
        out = [empty(item) for item in batch]
        for i, answer in zip(asked, PromptedStage.forward(self, [batch[i] for i in asked]) if asked else []):
            out[i] = answer
        return out

    def forward(self, batch: list[In]) -> list[Out]:
        requests = [self.render(item) for item in batch]
        outputs: list[Out | None] = [None] * len(batch)
        retry: list[tuple[int, ParseError, str]] = []
        for i, reply in enumerate(self._generate(requests)):
            outputs[i], error = self._read(reply, batch[i])
            if error is None:
                continue
            if isinstance(reply, RequestError):
                outputs[i] = self._failed(batch[i], error, "")
            else:
                retry.append((i, error, reply.text))
        if retry:
            retry_requests = [self.retry_request(batch[i], requests[i], text, e) for i, e, text in retry]
            for (i, first, _), reply in zip(retry, self._generate(retry_requests)):
                outputs[i], error = self._read(reply, batch[i])
                if error is not None:
                    outputs[i] = self._failed(batch[i], error, getattr(reply, "text", ""), first.salvage)
        return outputs  # type: ignore[return-value]
