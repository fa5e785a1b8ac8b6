"""Distil one prompted stage into a small local model: LoRA fine-tuning on the teacher's cached calls.

Every call a prompted stage makes goes through the LM response cache, which keeps the request
and the completion. This recipe turns one stage's cached calls (``teacher_model`` + ``match``)
into supervised (chat prompt -> completion) pairs with
``memlab.training.distill.distillation_examples``, fine-tunes a small causal LM with LoRA
adapters on them, and saves the best student as a merged transformers folder, which
``memlab.lm.hf.HFLM(model=<output_dir>/model)`` serves in place of the teacher.

The cache holds the calls made on every conversation, the held-out evaluation ones included:
with ``data.path`` set, every call whose messages quote a turn (of at least 20 characters) or a
question of the ``data.exclude_ids`` conversations is left out (``held_out`` in the counts), so
a student is never trained on the conversations it will be scored on.

Run: ``memlab train distill_stage --config configs/train/distill_stage.yaml [key=value ...]``

Config keys (their types, ranges and defaults in ``Settings``):

* ``recipe``: ``distill_stage``; ``output_dir``: the run folder (``metrics.jsonl``,
  ``distill.json``, ``model/``); written as ``<output_dir>.partial`` and renamed when done,
  so a finished folder is always complete (an interrupted run keeps its log in ``.partial``).
* ``seed``: python/numpy/torch seed, also salts the train/eval split.
* ``cache``: the response cache SQLite file (``default``: ``$MEMLAB_CACHE`` or
  ``~/.cache/memlab/responses.sqlite``).
* ``teacher_model``: the cache's model name to distil (null: every model).
* ``match``: regular expression searched in a call's first message, picking one stage's calls.
* ``data``: ``path``, the LoCoMo file the teacher ran on (null: nothing is excluded), and
  ``exclude_ids``, the conversations whose calls are left out (null: ``FIXED_EVAL_IDS``,
  conv-26 and conv-30). ``distill.json`` records the excluded ids and the ``held_out`` count.
* ``student``: a local model folder, a .gguf file or a known GGUF name
  (``smollm2-135m-instruct-q4_1``); GGUF weights are dequantized by transformers.
* ``lora``: ``rank``, ``alpha``, ``dropout``, ``target_modules`` (PEFT ``LoraConfig``).
* ``optim``: ``lr`` and ``weight_decay`` (AdamW, constant rate), ``epochs``, ``batch_size``,
  ``max_steps`` (null: no cap).
* ``eval_fraction``: share of distinct requests held out (at least one).
* ``max_length``: token limit of prompt + completion; longer examples are dropped (counted),
  since a cut-off target would teach the student never to stop.
* ``eval_every``: optimizer steps between evaluations (there is one before training and one
  at the end as well); ``patience``: evaluations without a lower eval loss before stopping.
* ``precision``: ``no``, ``fp16`` or ``bf16`` (accelerate; full precision on a CPU).

Phases, top to bottom (``memlab.training.Recipe``): ``setup`` (examples, split, student, LoRA,
tokenised batches), ``train`` (explicit loop with accelerate, progress bar, metrics log, early
stopping on the eval loss, best adapter weights kept in memory), ``save_checkpoint`` (merge,
save, rename). The loss is computed on completion tokens only (the prompt's labels are -100).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from tqdm.auto import tqdm

from memlab.bounds import NonNegativeFloat, OpenUnitFloat, PositiveFloat, PositiveInt
from memlab.clock import active_seconds
from memlab.config import ConfigError
from memlab.fileio import swap_in
from memlab.training import (
    EarlyStopping,
    MetricsLog,
    RecipeSettings,
    adamw,
    make_accelerator,
    recipe_settings,
    seed_everything,
    settings_record,
    total_steps,
    training_conversations,
)
from memlab.training.causal_lm import IGNORE_INDEX, LoraSettings, add_lora, collate, tokenize_pair, trainable_state
from memlab.training.distill import conversation_texts, distillation_dropped, distillation_examples
from memlab.training.supervision import FIXED_EVAL_IDS


@dataclass
class ExcludedData:
    """The LoCoMo file the teacher ran on (null: nothing is excluded) and the conversations whose
    calls are left out (null: ``FIXED_EVAL_IDS``)."""

    path: str | None = None
    exclude_ids: list[str] | None = None


@dataclass
class DistillOptimiser:
    """AdamW at a constant rate (no schedule)."""

    lr: PositiveFloat = 2e-4
    weight_decay: NonNegativeFloat = 0.01
    epochs: PositiveInt = 3
    batch_size: PositiveInt = 4
    max_steps: PositiveInt | None = None


@dataclass
class Settings(RecipeSettings):
    cache: str = "default"
    teacher_model: str | None = None
    match: str | None = None
    data: ExcludedData = field(default_factory=ExcludedData)
    student: str = "smollm2-135m-instruct-q4_1"
    lora: LoraSettings = field(default_factory=LoraSettings)
    optim: DistillOptimiser = field(default_factory=DistillOptimiser)
    eval_fraction: OpenUnitFloat = 0.1
    max_length: PositiveInt = 2048
    eval_every: PositiveInt = 50
    patience: PositiveInt = 3
    precision: Literal["no", "fp16", "bf16"] = "no"


@dataclass
class Run:
    settings: Settings
    out: Path
    work_dir: Path  # ``<output_dir>.partial``: renamed to ``out`` once complete
    excluded_conversations: list[str] = field(default_factory=list)
    data_card: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    accelerator: Any = None
    model: Any = None
    tokenizer: Any = None
    optimizer: Any = None
    train_loader: Any = None
    eval_loader: Any = None
    steps: int = 0
    log: MetricsLog | None = None
    best: dict[str, Any] | None = None  # step, eval_loss and a CPU copy of the adapter weights
    metrics: dict[str, Any] = field(default_factory=dict)  # what ``train`` measured


def resolve_settings(config: dict[str, Any]) -> Settings:
    """The config over ``Settings`` (``memlab.training.recipe_settings``), its values checked."""
    settings = recipe_settings(config, Settings(recipe="distill_stage"))
    if settings.data.exclude_ids and not settings.data.path:
        raise ConfigError("distill_stage: data.exclude_ids needs data.path, the file those conversations are in")
    return settings


# ----------------------------------------------------------------------------- set-up


def excluded_conversations(data: ExcludedData):
    """The conversations whose calls must not be distilled: ``data.exclude_ids`` (default
    ``FIXED_EVAL_IDS``) of ``data.path``; none without a ``data.path``."""
    if not data.path:
        return []
    return training_conversations(data.path, list(data.exclude_ids or FIXED_EVAL_IDS))


def load_examples(settings: Settings, exclude: Iterable[str] = ()):
    """The teacher's cached calls of one stage, less those quoting an ``exclude`` text, as a
    dataset (its card counts what was dropped); a clear error when none is left."""
    from memlab.lm.cache import ResponseCache, default_cache_path

    path = default_cache_path() if settings.cache == "default" else Path(settings.cache).expanduser()
    if not path.is_file():  # ResponseCache would create an empty file; say what is missing instead
        raise FileNotFoundError(f"distill_stage: no response cache at {path} (run the teacher pipeline first, "
                                "or set cache=PATH)")
    cache = ResponseCache.open(path)
    dataset = distillation_examples(cache, model=settings.teacher_model, match=settings.match, exclude=exclude)
    if len(dataset) == 0:
        raise ValueError(
            f"distill_stage: no cached call in {path} matches teacher_model={settings.teacher_model!r} and "
            f"match={settings.match!r} (models in the cache: {cache.models()}); "
            f"{dataset.info.description or ''}".strip()
        )
    return dataset


def request_hash(example: dict[str, Any], seed: int) -> str:
    """Identity of a request (messages + schema), salted with the seed: decides its split."""
    payload = json.dumps([example["messages"], example["json_schema"]], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(f"{seed}\0{payload}".encode()).hexdigest()


def split_examples(examples: list[dict[str, Any]], eval_fraction: float, seed: int):
    """Deterministic split by request: the same request (e.g. under two teachers) never straddles it."""
    requests = sorted({request_hash(e, seed) for e in examples})
    if len(requests) < 2:
        raise ValueError(f"distill_stage: {len(requests)} distinct request(s); need at least 2 to hold one out")
    n_eval = min(len(requests) - 1, max(1, round(eval_fraction * len(requests))))
    held_out = set(requests[:n_eval])  # sha256 order is a seeded shuffle
    train = [e for e in examples if request_hash(e, seed) not in held_out]
    evaluation = [e for e in examples if request_hash(e, seed) in held_out]
    return train, evaluation


def load_student(name: str):
    """(tokenizer, model) from a folder or a GGUF file, local files only (as ``memlab.lm.hf`` does)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from memlab.lm.models import resolve_model

    path = Path(name).expanduser()
    if path.is_dir():
        folder, gguf = path, None
    else:
        resolved = resolve_model(name)  # a known name or a .gguf path; raises naming what is missing
        folder, gguf = resolved.parent, resolved.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, local_files_only=True,
                                                 **_dequantized_gguf(gguf))
    if not tokenizer.chat_template:
        raise ValueError(f"distill_stage: the student's tokenizer ({name}) has no chat template")
    if tokenizer.eos_token_id is None:
        raise ValueError(f"distill_stage: the student's tokenizer ({name}) has no eos token to end a completion")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, model


def _dequantized_gguf(gguf: str | None) -> dict[str, Any]:
    """Ask for plain dense weights: LoRA needs ordinary Linear layers, and transformers refuses to
    ``save_pretrained`` a model it holds as GGUF-quantized (versions before ``GgufConfig`` always
    dequantize and need nothing)."""
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)} if gguf else {}


def setup(config: dict[str, Any]) -> Run:
    settings = resolve_settings(config)
    out = Path(settings.output_dir).expanduser()
    settings.output_dir = str(out)
    if out.exists() and not (out / "distill.json").is_file():
        raise FileExistsError(f"distill_stage: {out} exists and is not a distill_stage run; choose another output_dir")
    run = Run(settings=settings, out=out, work_dir=out.with_name(out.name + ".partial"))
    shutil.rmtree(run.work_dir, ignore_errors=True)
    seed_everything(settings.seed)
    held_out = excluded_conversations(settings.data)
    run.excluded_conversations = [c.id for c in held_out]
    dataset = load_examples(settings, exclude=conversation_texts(held_out))
    run.data_card = dataset.info.description
    examples = list(dataset)
    train_examples, eval_examples = split_examples(examples, settings.eval_fraction, settings.seed)
    run.tokenizer, model = load_student(settings.student)
    lora = settings.lora
    model = add_lora(model, lora.rank, lora.alpha, lora.dropout, lora.target_modules)
    tokenized = {}
    for split, rows in (("train", train_examples), ("eval", eval_examples)):
        kept = [t for t in (tokenize_pair(run.tokenizer, e["messages"], e["completion"], settings.max_length)
                         for e in rows) if t is not None]
        if not kept:
            raise ValueError(f"distill_stage: every {split} example is longer than max_length={settings.max_length} "
                             "tokens; raise max_length")
        tokenized[split] = kept
    run.counts = {"examples": len(examples), "train": len(tokenized["train"]), "eval": len(tokenized["eval"]),
                  "dropped_too_long": len(examples) - len(tokenized["train"]) - len(tokenized["eval"]),
                  "held_out": distillation_dropped(dataset)["held_out"]}
    generator = torch.Generator().manual_seed(settings.seed)
    pad_id = run.tokenizer.pad_token_id
    loaders = [torch.utils.data.DataLoader(tokenized[split], batch_size=settings.optim.batch_size,
                                           shuffle=split == "train", generator=generator,
                                           collate_fn=lambda b: collate(b, pad_id))
               for split in ("train", "eval")]
    run.steps = total_steps(len(tokenized["train"]), settings.optim)
    run.accelerator = make_accelerator(settings.precision)
    optimizer = adamw(model, settings.optim.lr, settings.optim.weight_decay)  # a constant rate: no schedule
    run.model, run.optimizer, run.train_loader, run.eval_loader = run.accelerator.prepare(model, optimizer, *loaders)
    run.log = MetricsLog(run.work_dir / "metrics.jsonl")  # only now: a config or data error leaves no folder
    return run


# ----------------------------------------------------------------------------- train


@torch.no_grad()
def evaluate(model, loader) -> float:
    """Mean loss per completion token over the eval set (batches weighted by their target tokens)."""
    model.eval()
    total, tokens = 0.0, 0
    for batch in loader:
        n = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())  # the model shifts labels by one
        total += float(model(**batch).loss) * n
        tokens += n
    model.train()
    return total / max(tokens, 1)


def train(run: Run) -> dict[str, Any]:
    accelerator, model, optimizer = run.accelerator, run.model, run.optimizer
    epochs, eval_every = run.settings.optim.epochs, run.settings.eval_every
    stopper = EarlyStopping(patience=run.settings.patience)

    def checkpoint_eval(step: int, epoch: int, train_loss: float | None) -> None:
        eval_loss = evaluate(model, run.eval_loader)
        improved = stopper.step(-eval_loss)  # EarlyStopping wants higher-is-better
        if improved:
            run.best = {"step": step, "eval_loss": eval_loss, "weights": trainable_state(accelerator.unwrap_model(model))}
        run.log.write(step=step, epoch=epoch, train_loss=train_loss, eval_loss=round(eval_loss, 5), best=improved)

    model.train()
    checkpoint_eval(0, 0, None)  # the untrained student is the baseline to beat
    step, seen, running, running_n = 0, 0, 0.0, 0
    progress = tqdm(total=run.steps, desc="distill", disable=not accelerator.is_local_main_process)
    start = active_seconds()
    for epoch in range(1, epochs + 1):
        for batch in run.train_loader:
            with accelerator.autocast():  # the loss too, not only the forward ``prepare`` wraps
                loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            seen += int(batch["input_ids"].shape[0])
            loss_value = loss.detach().item()
            running, running_n = running + loss_value, running_n + 1
            progress.update(1)
            progress.set_postfix(loss=f"{loss_value:.3f}")
            if step % eval_every == 0 or step == run.steps:
                checkpoint_eval(step, epoch, round(running / running_n, 5))
                running, running_n = 0.0, 0
            if step >= run.steps or stopper.should_stop:
                break
        if step >= run.steps or stopper.should_stop:
            break
    progress.close()
    seconds = active_seconds() - start
    run.metrics = {"steps": step, "train_seconds": round(seconds, 2), "train_examples_seen": seen,
                   "examples_per_second": round(seen / seconds, 3) if seconds > 0 else math.nan,
                   "stopped_early": stopper.should_stop, "best_step": run.best["step"],
                   "best_eval_loss": round(run.best["eval_loss"], 5)}
    return run.metrics


# ----------------------------------------------------------------------------- save


def save_checkpoint(run: Run) -> Path:
    """Merge the best adapter weights into the student, save it with its tokenizer and
    ``distill.json``, then rename the finished folder into place."""
    model = run.accelerator.unwrap_model(run.model)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in run.best["weights"]:
                param.copy_(run.best["weights"][name])
    merged = model.merge_and_unload()
    merged.save_pretrained(run.work_dir / "model")
    run.tokenizer.save_pretrained(run.work_dir / "model")
    settings = run.settings
    record = {"teacher_model": settings.teacher_model, "match": settings.match, "cache": settings.cache,
              "student": settings.student, "excluded_conversations": run.excluded_conversations,
              "examples": run.counts, "metrics": run.metrics, "data_card": run.data_card,
              "config": settings_record(settings)}
    (run.work_dir / "distill.json").write_text(json.dumps(record, indent=2, default=str))
    swap_in(run.work_dir, run.out)  # only a previous run of this recipe is replaced
    return run.out


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    metrics = train(run)
    path = save_checkpoint(run)
    return {"examples": run.counts, "excluded_conversations": run.excluded_conversations, **metrics,
            "output": str(path), "model": str(path / "model")}
