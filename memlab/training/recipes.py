"""What every training recipe (``memlab.recipes``) shares, and how ``memlab train`` finds them.

A recipe is a flat module of ``memlab.recipes``, readable top to bottom (DESIGN.md, "Training recipes"): it names
its phases after ``Recipe`` (set-up, train, save a checkpoint) and needs no base class. This
module holds only the pieces that would otherwise be copied into each script:

* ``load_recipe_config``: the recipe's YAML (the same ``_component_`` mechanism as pipeline
  configs, ``_base_`` and dotted overrides included) with its common keys checked;
* ``recipe_settings``: a config over the recipe's ``Settings`` (a dataclass: its fields, their
  annotations and defaults), checked by the config validator like any component node (each
  recipe's ``setup`` calls it, so a config given as a dict is checked too), returned as that
  dataclass, so a recipe reads ``settings.optim.lr``, typed; ``RecipeSettings``,
  ``ConversationSettings``, ``GradientSettings``, ``DataSettings``,
  ``Optimiser``, ``encoder_stage`` and ``evaluator_node`` are the parts recipes share;
* ``start_recipe``: a recipe's first step (settings, seed, its ``ConversationSplit``);
* ``seed_everything``: one seed for python, numpy and torch (CPU and GPU);
* ``make_accelerator``: accelerate's ``Accelerator`` for device and precision, so the same
  script runs on this CPU and on a GPU;
* ``EarlyStopping`` on an evaluation metric (higher is better);
* ``MetricsLog``: one JSON line per evaluation, flushed as it is written, so a run that is
  interrupted keeps its log;
* ``recipe_path`` / ``load_recipe`` / ``run_recipe``: locate ``memlab/recipes/<name>.py``, import
  it, run its ``main(config)``.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.util
import json
import logging
import math
import os
import pkgutil
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, NamedTuple, Protocol, TypeVar

import numpy as np
import torch

from memlab.bounds import NonNegativeFloat, PositiveFloat, PositiveInt, UnitFloat
from memlab.clock import active_seconds
from memlab.config import ConfigError, load_config, validate_settings
from memlab.fileio import write_json_atomic

if TYPE_CHECKING:
    from memlab.training.evaluators import StageEvaluator
    from memlab.types import Conversation

log = logging.getLogger(__name__)


class Recipe(Protocol):
    """What a recipe module (``memlab/recipes/<name>.py``) provides: its phases, in order, as module
    functions over one run state, and ``main`` running them (a shape, not a base class)."""

    def setup(self, config: dict[str, Any]) -> Any: ...

    def train(self, run: Any) -> dict[str, Any]: ...

    def save_checkpoint(self, run: Any) -> Path: ...

    def main(self, config: dict[str, Any]) -> dict[str, Any]: ...


#: Keys every recipe config has; the rest is the recipe's own.
REQUIRED_KEYS = ("recipe", "output_dir")


def load_recipe_config(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    config = load_config(path, overrides)
    missing = [k for k in REQUIRED_KEYS if k not in config]
    if missing:
        raise ConfigError(f"{path}: a training config needs the keys {missing}")
    config.setdefault("seed", 0)
    return config


SettingsT = TypeVar("SettingsT", bound="RecipeSettings")


def recipe_settings(config: dict[str, Any], defaults: SettingsT) -> SettingsT:
    """``config`` over ``defaults`` (the recipe's ``Settings()``), checked by
    ``memlab.config.validate_settings``: an unknown key or a value that does not fit its field's
    annotation (type, range, choices) is a ConfigError naming it, so a typo is never silently
    ignored; a section (``optim``, ``data``) is merged over its default field by field; a
    ``_component_`` node (``stage``) is validated and kept whole, for the recipe to build. Returned
    as an instance of ``defaults``' class, its sections as theirs (``settings_record`` turns it back
    into the config ``training.json`` records)."""
    recipe = config.get("recipe", defaults.recipe)
    missing = [k for k in REQUIRED_KEYS if k not in config]
    if missing:
        raise ConfigError(f"{recipe}: a training config needs the keys {missing}")
    try:
        return _as_settings(validate_settings(config, defaults), defaults)
    except ConfigError as e:
        raise ConfigError(f"{recipe}: {e}") from None


def _as_settings(values: dict[str, Any], defaults: Any) -> Any:
    """The checked ``values`` as an instance of ``defaults``' dataclass, a section (a field whose
    default is a dataclass) as one of its own."""
    return type(defaults)(**{name: _as_settings(value, getattr(defaults, name))
                             if dataclasses.is_dataclass(getattr(defaults, name)) else value
                             for name, value in values.items()})


def settings_record(settings: RecipeSettings) -> dict[str, Any]:
    """``settings`` as the plain config they were read from (every field, sections as mappings):
    what ``training.json`` records and a run's fingerprint is taken over."""
    return dataclasses.asdict(settings)


def record_training(checkpoint: str | os.PathLike, settings: RecipeSettings, summary: dict[str, Any],
                    evaluator: "StageEvaluator") -> None:
    """Write the run's record (its config, ``split``, scores, and the ``evaluator`` its validation
    used, as its config node, which ``memlab evaluate-stage`` rebuilds) into its saved
    ``checkpoint`` as ``training.json`` and re-seal the checkpoint's manifest over it: the split
    is what ``Stage.trained_on`` reads, so it must be as tamper-evident as the weights."""
    from memlab.checkpoint import TRAINING_FILE, seal_checkpoint

    write_json_atomic(Path(checkpoint) / TRAINING_FILE,
                      {"config": settings_record(settings), "evaluator": evaluator.node(), **summary})
    seal_checkpoint(checkpoint)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def make_accelerator(precision: str = "no", cpu: bool = False, cpu_bf16: bool = False):
    """accelerate's device/precision handling (``precision``: no, fp16, bf16). Without a GPU the
    precision is full, except bf16 with ``cpu_bf16`` on a CPU with bf16 kernels (``avx512_bf16``):
    there autocast pays off for a large model's matrix products (the 0.5B answerer: 6.5 s a
    900-token step against 11 s in full precision), not for the small encoders the other recipes
    train. A CPU without them emulates bf16, several times slower than full precision (an AVX2
    EPYC: 173 ms against 31 ms for a 900-token batch through one of SmolLM2's linear layers)."""
    from accelerate import Accelerator

    if not torch.cuda.is_available() and precision != "no":
        autocast = cpu_bf16 and precision == "bf16"  # half precision for a small encoder is slower here
        if autocast and not _cpu_has_bf16_kernels():
            log.warning("bf16 asked for, but this CPU has no bf16 kernels (avx512_bf16): training in full "
                        "precision, several times faster here")
            autocast = False
        if not autocast:
            precision = "no"
    from accelerate.state import AcceleratorState

    # accelerate keeps one state per process: a second recipe in the same process (tests, a
    # leave-one-conversation-out comparison) with another precision would be refused
    AcceleratorState._reset_state(reset_partial_state=True)
    return Accelerator(mixed_precision=precision, cpu=cpu)


def _cpu_has_bf16_kernels() -> bool:
    from memlab.eval.machine import cpu_description

    features = cpu_description()["features"]
    return features is None or "avx512_bf16" in features  # a CPU that does not say: as asked


class EarlyStopping:
    """Stop after ``patience`` evaluations without an improvement of at least ``min_delta``."""

    def __init__(self, patience: int = 3, min_delta: float = 0.0) -> None:
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        self.patience = patience
        self.min_delta = min_delta
        self.best: float | None = None
        self.bad_evaluations = 0

    def step(self, value: float) -> bool:
        """Record one evaluation; True when it is the best so far (save a checkpoint then)."""
        if self.best is None or value > self.best + self.min_delta:
            self.best = value
            self.bad_evaluations = 0
            return True
        self.bad_evaluations += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.bad_evaluations >= self.patience


class MetricsLog:
    """Append-only JSON-lines log of a run (``for_checkpoint``: ``<output_dir>.metrics.jsonl``,
    beside the checkpoint folder, which ``Stage.save`` replaces whole)."""

    def __init__(self, path: str | os.PathLike, keep: bool = False) -> None:
        """A new, empty log at ``path``; with ``keep`` (a resumed run) its earlier lines stay."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._start = active_seconds()
        if not (keep and self.path.is_file()):
            self.path.write_text("")

    @classmethod
    def for_checkpoint(cls, output_dir: str | os.PathLike, keep: bool = False) -> "MetricsLog":
        output_dir = Path(output_dir)
        return cls(output_dir.parent / f"{output_dir.name}.metrics.jsonl", keep=keep)

    def write(self, **record: Any) -> dict[str, Any]:
        record = {"elapsed_s": round(active_seconds() - self._start, 2), **record}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
        return record


#: The package whose modules are the recipes ``memlab train`` runs.
RECIPES_PACKAGE = "memlab.recipes"


def recipe_path(name: str) -> Path:
    """The file of recipe ``name`` (``memlab/recipes/<name>.py``); a ConfigError naming the
    recipes there when there is none."""
    if not name.replace("_", "").isalnum():
        raise ConfigError(f"recipe name {name!r} must be a plain identifier (e.g. finetune_reranker)")
    spec = importlib.util.find_spec(f"{RECIPES_PACKAGE}.{name}")
    if spec is None or spec.origin is None:
        package = importlib.import_module(RECIPES_PACKAGE)
        known = sorted(m.name for m in pkgutil.iter_modules(package.__path__))
        raise ConfigError(f"no recipe {name!r} in {RECIPES_PACKAGE} (recipes: {known})")
    return Path(spec.origin)


def load_recipe(name: str) -> Recipe:
    """The recipe module ``memlab.recipes.<name>`` (its phases can then be called one by one)."""
    path = recipe_path(name)
    module = importlib.import_module(f"{RECIPES_PACKAGE}.{name}")
    if not callable(getattr(module, "main", None)):
        raise ConfigError(f"{path} has no main(config) function")
    return module


def run_recipe(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """Run recipe ``name``'s ``main(config)``; returns its summary."""
    return load_recipe(name).main(config)


def training_conversations(path: str | os.PathLike, ids: list[str] | tuple[str, ...] | None = None,
                           sessions: int | dict[str, int | None] | None = None):
    """The conversations of the LoCoMo file ``path``; with ``ids``, only those (in the file's order),
    and a ConfigError naming any id the file does not hold and the ones it does; with ``sessions``,
    each cut to its first ``sessions`` sessions (``memlab.data.prefix.first_sessions``), or, when
    ``sessions`` maps conversation ids to counts, each cut to its own count (an id it does not
    name, or names with null, is kept whole: a full build beside prefixes), and a ConfigError for a
    mapped id that is not among the chosen conversations."""
    from memlab.data import DataError, load_dataset, select_conversations
    from memlab.data.prefix import first_sessions

    conversations = load_dataset(path)
    try:
        chosen = select_conversations(conversations, ids, source=path)
    except DataError as e:  # a config's mistake, reported like the config's others
        raise ConfigError(str(e)) from None
    if sessions is None:
        return chosen
    if not isinstance(sessions, dict):
        return [first_sessions(c, sessions) for c in chosen]
    unknown = sorted(set(sessions) - {c.id for c in chosen})
    if unknown:
        raise ConfigError(f"data.sessions names {unknown}, which are not among the conversations "
                          f"{[c.id for c in chosen]}")
    return [c if sessions.get(c.id) is None else first_sessions(c, sessions[c.id]) for c in chosen]


@dataclass
class RecipeSettings:
    """The settings every recipe has (``recipe`` and ``output_dir`` are required); a recipe's
    ``Settings`` subclasses this or ``GradientSettings`` and declares its own, with defaults."""

    recipe: str = ""
    output_dir: str | os.PathLike = ""
    seed: int = 0


@dataclass
class DataSettings:
    """The ``data`` section of the recipes that split conversations (``recipe_conversations``)."""

    path: str | None = None
    eval_ids: list[str] | None = None
    validation_ids: list[str] | None = None
    conversations: list[str] | None = None
    max_questions: PositiveInt | None = None
    sessions: PositiveInt | dict[str, PositiveInt | None] | None = None
    final_fit: bool = False


@dataclass
class ConversationSettings(RecipeSettings):
    """A recipe that splits LoCoMo conversations (``recipe_conversations``)."""

    data: DataSettings = field(default_factory=DataSettings)


def encoder_stage(component: str) -> Callable[[], dict[str, Any]]:
    """The default of a recipe's ``stage`` (a ``field`` default_factory): a node of the neural stage
    ``component`` over a default ``TextEncoder``."""
    return lambda: {"_component_": component, "encoder": {"_component_": "memlab.stages.encoder.TextEncoder"}}


def evaluator_node(component: str, **settings: Any) -> Callable[[], dict[str, Any]]:
    """The default of a recipe's ``validation`` (a ``field`` default_factory): a node of its
    family's evaluator ``component`` with the recipe's own defaults. A config's ``validation:``
    node replaces it; the recipe builds it (``instantiate``), validates, early-stops and scores
    the held-out part with it, takes its first stage or teacher from it, and records it
    (``record_training``)."""
    return lambda: {"_component_": component, **copy.deepcopy(settings)}


@dataclass
class Optimiser:
    """``optim`` of a gradient recipe (``prepare_training``): AdamW (``adamw``; ``head_lr`` for a
    stage's freshly initialised head, null: ``lr``), ``epochs`` over the examples or ``max_steps``
    (null: no cap), ``warmup_fraction`` of the steps warming up, then a linear decay."""

    lr: PositiveFloat = 1e-4
    head_lr: PositiveFloat | None = None
    weight_decay: NonNegativeFloat = 0.01
    epochs: PositiveInt = 1
    batch_size: PositiveInt = 16
    warmup_fraction: UnitFloat = 0.1
    max_steps: PositiveInt | None = None


@dataclass
class GradientSettings(ConversationSettings):
    """What every gradient recipe adds: its optimiser (``prepare_training``), accelerate's precision
    (ignored on a CPU), a progress bar."""

    optim: Optimiser = field(default_factory=Optimiser)
    precision: Literal["no", "fp16", "bf16"] = "no"
    progress: bool = True


class ConversationSplit(NamedTuple):
    """A recipe's conversations: to train on, to select on (early stopping), to score once at the end."""

    train: list[Conversation]
    validation: list[Conversation]
    evaluation: list[Conversation]

    def ids(self) -> dict[str, list[str]]:
        """Each part's conversation ids, as ``training.json`` records the split."""
        return {part: [c.id for c in conversations] for part, conversations in self._asdict().items()}


def start_recipe(config: dict[str, Any], defaults: SettingsT, final_fit_supported: bool = False
                 ) -> tuple[SettingsT, ConversationSplit]:
    """A recipe's first step: its config checked over ``defaults`` (``recipe_settings``), every
    seed set (``seed_everything``), its conversations split (``recipe_conversations``)."""
    settings = recipe_settings(config, defaults)
    seed_everything(settings.seed)
    return settings, recipe_conversations(settings.data, final_fit_supported)


def recipe_conversations(data: DataSettings, final_fit_supported: bool = False) -> ConversationSplit:
    """(train, validation, evaluation) conversations from a recipe's ``data`` section.

    ``data.path``: a LoCoMo file, required (the embedded sample holds a single conversation, which
    cannot be split three ways); ``data.conversations`` keeps only those ids, ``data.max_questions``
    the first questions of each, ``data.sessions`` the first sessions of each, or a mapping of ids to
    their own counts (and the questions whose evidence lies in them: an LLM-built memory is
    affordable on a prefix). ``data.eval_ids``:
    the held-out evaluation conversations (default ``FIXED_EVAL_IDS``, the fixed 5/2 split). ``data.validation_ids``: training conversations set
    aside for early stopping (default: the last training one), so model selection never looks at
    the evaluation conversations, which are scored once, at the end. A config that names
    conversations the file does not hold is a ConfigError.

    ``data.final_fit: true`` trains on every conversation, with no validation and no held-out
    evaluation (both returned empty): the final model, whose length and settings were chosen
    by a leave-one-conversation-out run (``memlab compare-stages ... --loco``). Only recipes that can train
    a fixed length without validation pass ``final_fit_supported``.
    """
    from memlab.data.prefix import first_questions
    from memlab.training.supervision import FIXED_EVAL_IDS, fixed_split, split_conversations

    if not data.path:
        raise ConfigError("data.path is required: a LoCoMo file with at least three conversations (train, "
                          "validation, evaluation), e.g. ../shared/data/locomo/locomo10_dev.json; the embedded "
                          "sample has only one")
    if data.final_fit and not final_fit_supported:
        raise ConfigError("data.final_fit: this recipe selects on a validation conversation and cannot train "
                          "without one; leave final_fit false")
    if data.final_fit and (data.eval_ids or data.validation_ids):
        raise ConfigError("data.final_fit trains on every conversation: set data.eval_ids=null and "
                          "data.validation_ids=null")
    conversations = training_conversations(data.path, data.conversations, data.sessions)
    # a quick run (tests, smoke checks): the first questions of each
    conversations = first_questions(conversations, data.max_questions)
    if data.final_fit:
        return ConversationSplit(conversations, [], [])
    try:
        split = fixed_split([c.id for c in conversations], data.eval_ids or FIXED_EVAL_IDS)
    except ValueError as e:  # eval ids absent from the data, or nothing left to train on
        raise ConfigError(f"data.eval_ids: {e}") from None
    train, evaluation = split_conversations(conversations, split)
    validation_ids = data.validation_ids or [train[-1].id]
    unknown = set(validation_ids) - {c.id for c in train}
    if unknown:
        raise ConfigError(f"data.validation_ids {sorted(unknown)} must be training conversations "
                          f"({[c.id for c in train]})")
    validation = [c for c in train if c.id in validation_ids]
    train = [c for c in train if c.id not in validation_ids]
    if not train:
        raise ConfigError("data.validation_ids leave no conversation to train on")
    return ConversationSplit(train, validation, evaluation)


def total_steps(items: int, optim: Optimiser) -> int:
    """Optimiser steps for ``items`` examples: ``optim.epochs`` passes of ``optim.batch_size``,
    capped by ``optim.max_steps`` (null: no cap)."""
    steps = math.ceil(items / optim.batch_size) * optim.epochs
    return min(steps, optim.max_steps) if optim.max_steps else steps


def adamw(stage: torch.nn.Module, lr: float, weight_decay: float, head_lr: float | None = None
          ) -> torch.optim.AdamW:
    """AdamW over the stage's trainable parameters; pair it with ``linear_schedule`` or, for a
    constant rate, no schedule. With ``head_lr`` (not None) the parameters outside ``encoder.``
    (heads that start from scratch, and see few steps on little data: Adam moves a weight about
    lr per step) get that rate instead."""
    trainable = [(name, p) for name, p in stage.named_parameters() if p.requires_grad]
    if head_lr is None:
        return torch.optim.AdamW([p for _, p in trainable], lr=lr, weight_decay=weight_decay)
    encoder = [p for name, p in trainable if name.startswith("encoder.")]
    heads = [p for name, p in trainable if not name.startswith("encoder.")]
    return torch.optim.AdamW([{"params": encoder, "lr": lr}, {"params": heads, "lr": head_lr}],
                             weight_decay=weight_decay)


def linear_schedule(optimizer, total_steps: int, warmup_fraction: float = 0.1):
    """Linear warm-up to the optimiser's learning rate, then linear decay to zero."""
    warmup = max(1, int(total_steps * warmup_fraction))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def prepare_training(stage: torch.nn.Module, settings: GradientSettings, items: int, cpu_bf16: bool = False):
    """``(stage, optimizer, scheduler, accelerator)`` for a gradient recipe: AdamW over the
    stage's trainable parameters (``adamw``), the warm-up then linear schedule over the steps
    ``items`` examples make (``total_steps``), and accelerate's device and ``precision``, the
    stage and optimiser prepared by it (``cpu_bf16``: ``make_accelerator``'s)."""
    optim = settings.optim
    optimizer = adamw(stage, optim.lr, optim.weight_decay, optim.head_lr)
    scheduler = linear_schedule(optimizer, total_steps(items, optim), optim.warmup_fraction)
    accelerator = make_accelerator(settings.precision, cpu_bf16=cpu_bf16)
    stage, optimizer = accelerator.prepare(stage, optimizer)
    return stage, optimizer, scheduler, accelerator
