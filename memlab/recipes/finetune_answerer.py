"""Fine-tune the answer stage: LoRA on a local causal LM, from the requests the answer stage sends (issue 83).

    memlab train finetune_answerer --config configs/train/answerer.yaml [key=value ...]

Read top to bottom: ``setup`` (conversations split by conversation; the examples of each part,
``memlab.training.answering.answer_examples``: the ``pipeline`` config retrieves for every
question as it does when it answers, and its answer stage's exact request is the input, the
gold answer, audited where the errata correct it, or the abstention for category 5 the target;
the student with a fresh LoRA adapter), ``train`` (``memlab.training.loop.fit``: the loss on the
target tokens, the validation conversation's loss every ``eval_every`` steps, early stopping,
the best adapter kept; the run's state saved every ``checkpoint_every`` steps), ``save_checkpoint``
(the best adapter), then the loss on the held-out conversations, and the record.

**Resumable.** Training on a CPU takes hours. Everything goes into ``<output_dir>.partial``: the
examples (``examples.jsonl``, so a restart does not retrieve again), the best adapter so far and
the run's state (``memlab.training.resume``). Started again with the same config, the recipe
continues from the last saved step; once complete, the folder is renamed to ``output_dir``. The
examples are kept by conversation and keyed on the data and the resolved pipeline, not the split:
``examples`` names a file an earlier run made (``checkpoints/answerer-examples.jsonl.gz``, all
seven dev conversations under ``rag_turns_best`` with resolved dates), so a final fit or a rerun
on a new machine retrieves nothing.

**The checkpoint** is a peft adapter folder (``adapter_config.json``, ``adapter_model.safetensors``)
with ``training.json`` (config, ``split``, example counts, the validation curve, the held-out
loss) and ``README.md``, its card. ``memlab.lm.hf.HFLM(model=<student>, adapter=<output_dir>)``
serves it behind the same prompted answerer (one config node, as the card says);
``training.json``'s split is what the runner's training-overlap check reads, as for any stage.

**The student** ships as GGUF in a package (``memlab models``): transformers dequantises it to
dense weights (``HFLM.loaded``), the route with no download, and the adapter is served over the
same dequantised weights it was trained on.

Config keys (their types, ranges and defaults in ``Settings``): ``recipe, output_dir, seed,
precision`` (no/fp16/bf16, accelerate's autocast; bf16 also runs on a CPU with bf16 kernels),
``progress``, ``data {path, eval_ids, validation_ids, conversations, max_questions, final_fit}``,
``pipeline`` and ``pipeline_overrides`` (the retrieval whose requests are learnt: the row the
adapter will serve), ``student`` (a known model name, a .gguf file or a model folder), ``lora
{rank, alpha, dropout, target_modules}``, ``optim {lr, weight_decay, epochs, batch_size,
warmup_fraction, max_steps}``, ``max_length`` (prompt + target tokens; longer examples are
dropped and counted), ``eval_every`` (steps), ``patience`` (validations), ``validation_examples``
(cap: N spread evenly over the validation examples), ``checkpoint_every`` (steps between saved states), ``held_out_loss`` (score
the evaluation conversations' loss at the end), ``examples`` (a file of examples made earlier),
``stop_after`` (steps: end a run early with the whole run's schedule), ``abstention_share`` (the
most of the training examples whose target is the abstention: category 5 drawn down to it),
``select_on`` (``loss``, the validation examples' loss per target token, or ``answers``, their answers
generated and scored as a row scores them, ``memlab.training.answering.answer_scores``),
``answer_tokens`` (the most tokens a generated validation answer has: the answer stage's ``max_tokens``),
``gradient_checkpointing`` (recompute activations in the backward pass: the memory a 1.5B student needs)
and ``adapter_dtype`` (the dtype the checkpoint's weights are written in: float16 halves the file).
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from memlab.bounds import PositiveInt, UnitFloat
from memlab.config import PipelineConfig, build_pipeline, load_config
from memlab.fileio import atomic_file, swap_in, write_json_atomic
from memlab.lm.errors import ParseError
from memlab.lm.hf import HFLM
from memlab.lm.types import ChatRequest
from memlab.stages.answer.base import clean_answer
from memlab.training import (
    GradientSettings,
    MetricsLog,
    Optimiser,
    prepare_training,
    settings_record,
    start_recipe,
    total_steps,
)
from memlab.training.answering import AnswerExample, answer_examples, answer_scores, capped_abstentions
from memlab.training.causal_lm import (
    ADAPTER_WEIGHTS,
    LoraSettings,
    add_lora,
    cast_adapter,
    completion_loss,
    mean_completion_loss,
    recompute_activations,
    tokenize_pair,
)
from memlab.training.loop import Optimisation, fit, shuffled_batches
from memlab.training.resume import Resumption, config_fingerprint
from memlab.types import Conversation

EXAMPLES_FILE = "examples.jsonl"
#: The data settings a conversation's examples depend on (with the resolved pipeline): not the
#: split, so a final fit reuses the examples of the split run.
EXAMPLES_DEPEND_ON = ("path", "max_questions", "sessions")
ADAPTER = "adapter"
STATE = "state"
CARD = "README.md"


@dataclass
class Settings(GradientSettings):
    #: The retrieval whose answer requests are learnt (+ dotted overrides).
    pipeline: PipelineConfig = "configs/pipelines/rag_turns_best.yaml"
    pipeline_overrides: list[str] = field(default_factory=list)
    student: str = "qwen2.5-coder-0.5b"
    lora: LoraSettings = field(default_factory=lambda: LoraSettings(rank=16, alpha=32))
    optim: Optimiser = field(default_factory=lambda: Optimiser(lr=2e-4, epochs=2, batch_size=4,
                                                               warmup_fraction=0.05))
    precision: Literal["no", "fp16", "bf16"] = "bf16"
    max_length: PositiveInt = 2048
    eval_every: PositiveInt = 50
    patience: PositiveInt = 3
    validation_examples: PositiveInt | None = None
    checkpoint_every: PositiveInt = 10
    held_out_loss: bool = True
    #: End the run after this many steps, the learning-rate schedule still that of the whole run,
    #: keeping the best adapter so far (a run boxed into the hours a CPU session has). Not part of
    #: the run's identity: started again with it, a saved run past that step ends at once.
    stop_after: PositiveInt | None = None
    #: A file of examples an earlier run wrote (``<output_dir>.partial/examples.jsonl``, gzip or
    #: not) to read before retrieving: the conversations it holds for this data and pipeline are
    #: not retrieved again. Null: the run's own folder only.
    examples: str | None = None
    #: The most of the training examples whose target is the abstention (category 5, drawn down
    #: with the seed); null keeps them all (LoCoMo's 24%, which taught the 0.5B to abstain on half
    #: the answerable questions: BENCHMARKS, issue 83). Validation keeps every example.
    abstention_share: UnitFloat | None = None
    #: What early stopping selects on: ``loss`` (per target token; an abstention target is cheap, so
    #: it cannot see over-abstaining) or ``answers`` (the validation answers generated, greedy, and
    #: scored: ``score`` of ``answer_scores``; a validation of 100 costs a few minutes on a CPU).
    select_on: Literal["loss", "answers"] = "loss"
    #: The most tokens a generated validation answer has (the answer stage's ``max_tokens``).
    answer_tokens: PositiveInt = 64
    #: Keep each decoder layer's input only and recompute the rest in the backward pass (same
    #: loss and gradients, dropout masks replayed). The 1.5B at a batch of four 950-token examples
    #: needs more than 24 GB without it, 14.3 GB with it, and steps faster (BENCHMARKS, issue 83).
    #: Not part of the run's identity: a saved run continues with it on or off.
    gradient_checkpointing: bool = False
    #: The dtype the checkpoint's adapter weights are written in, once training and the held-out
    #: loss (in full precision) are done; the card names the largest change the cast made. float16
    #: halves the file: the 1.5B's rank-8 adapter is 8.7 MB in float32, over the repository's 5 MB
    #: a file. Not part of the run's identity: it changes only the file written at the end.
    adapter_dtype: Literal["float32", "float16", "bfloat16"] = "float32"


@dataclass
class Run:
    settings: Settings
    out: Path
    work: Path  # ``<output_dir>.partial``: renamed to ``out`` once complete
    split: dict[str, list[str]] = field(default_factory=dict)
    examples: dict[str, list[AnswerExample]] = field(default_factory=dict)  # part -> examples
    rows: dict[str, list[dict[str, list[int]]]] = field(default_factory=dict)  # part -> tokenised examples
    dropped: dict[str, int] = field(default_factory=dict)  # part -> examples over max_length
    tokenizer: Any = None
    model: Any = None
    accelerator: Any = None
    optimizer: Any = None
    scheduler: Any = None
    log: MetricsLog | None = None
    resume: Resumption | None = None


def setup(config: dict[str, Any]) -> Run:
    settings, parts = start_recipe(config, Settings(recipe="finetune_answerer"), final_fit_supported=True)
    out = Path(settings.output_dir).expanduser()
    if out.exists() and not (out / "training.json").is_file():
        raise FileExistsError(f"finetune_answerer: {out} exists and is not a trained answerer; choose another "
                              "output_dir")
    run = Run(settings=settings, out=out, work=out.with_name(out.name + ".partial"), split=parts.ids())
    run.work.mkdir(parents=True, exist_ok=True)
    run.examples = cached_examples(settings, parts._asdict(), run.work / EXAMPLES_FILE)
    run.examples["train"] = capped_abstentions(run.examples["train"], settings.abstention_share, settings.seed)
    run.tokenizer, base = HFLM(settings.student, cache=None, dtype="float32").loaded()
    limit = settings.max_length
    for part, examples in run.examples.items():
        tokenised = [tokenize_pair(run.tokenizer, e.messages, e.target, limit) for e in examples]
        run.examples[part] = [e for e, row in zip(examples, tokenised) if row is not None]  # beside its rows
        run.rows[part] = [row for row in tokenised if row is not None]
        run.dropped[part] = len(tokenised) - len(run.rows[part])
    if not run.rows["train"]:
        raise ValueError(f"finetune_answerer: no training example of at most max_length={limit} tokens "
                         f"({len(run.examples['train']) + run.dropped['train']} examples before the cut)")
    kept = spread(len(run.rows["validation"]), settings.validation_examples)
    run.rows["validation"] = [run.rows["validation"][i] for i in kept]
    run.examples["validation"] = [run.examples["validation"][i] for i in kept]
    lora = settings.lora
    model = add_lora(base, lora.rank, lora.alpha, lora.dropout, lora.target_modules)
    if settings.gradient_checkpointing:
        recompute_activations(model)
    run.model, run.optimizer, run.scheduler, run.accelerator = prepare_training(model, settings, len(run.rows["train"]),
                                                                             cpu_bf16=True)
    # a saved state continues only the run of this very config (where it writes and whether it
    # shows a bar aside): another one is refused, naming the folder
    trained_by = config_fingerprint({k: v for k, v in settings_record(settings).items()
                                     if k not in ("output_dir", "progress", "examples", "stop_after",
                                                 "gradient_checkpointing", "adapter_dtype")})
    run.resume = Resumption(run.work / STATE, settings.checkpoint_every, trained_by)
    run.log = MetricsLog.for_checkpoint(out, keep=run.resume.path.is_file())  # a resumed run keeps its lines
    return run


def spread(n: int, cap: int | None) -> list[int]:
    """The indices of ``cap`` of ``n`` items spread evenly over them (all with None): a validation
    cap that keeps every category, where the first ``cap`` would not (LoCoMo lists its
    adversarial questions last)."""
    if cap is None or cap >= n:
        return list(range(n))
    return [i * n // cap for i in range(cap)]


def examples_of(settings: Settings, conversations) -> list[AnswerExample]:
    """The answer-stage examples of ``conversations`` under the recipe's pipeline (none: empty)."""
    if not conversations:
        return []
    pipeline, _, _ = build_pipeline(settings.pipeline, list(settings.pipeline_overrides or []))
    return answer_examples(pipeline, conversations)


def examples_key(settings: Settings) -> str:
    """What a conversation's examples are made from: the data settings ``EXAMPLES_DEPEND_ON`` and
    the pipeline's resolved tree (an edited pipeline file makes them again)."""
    return config_fingerprint({"data": {k: getattr(settings.data, k) for k in EXAMPLES_DEPEND_ON},
                               "pipeline": load_config(settings.pipeline, list(settings.pipeline_overrides or []))})


def cached_examples(settings: Settings, parts: dict[str, Sequence[Conversation]],
                    path: Path) -> dict[str, list[AnswerExample]]:
    """The examples of each part. Retrieval for every question of seven conversations takes most
    of an hour on two cores, so a conversation's examples are read from ``path`` (this run's file)
    or the ``examples`` file when one was made with the same ``examples_key``, and only the
    conversations neither holds are made; ``path`` is then rewritten whole with all of them."""
    key = examples_key(settings)
    known: dict[str, list[AnswerExample]] = {}
    given = settings.examples
    if given is not None:
        found_key, found = read_examples(Path(given))
        if found_key != key:
            raise ValueError(f"finetune_answerer: examples={given} was made from other data or another pipeline "
                             f"(key {found_key}, this run's {key}); set examples: null to make them")
        known.update(found)
    if path.is_file():
        found_key, found = read_examples(path)
        if found_key == key:
            known.update(found)
    wanted = [c for conversations in parts.values() for c in conversations]
    missing = [c for c in wanted if c.id not in known]
    if missing:
        made = examples_of(settings, missing)
        known.update({c.id: [e for e in made if e.conversation_id == c.id] for c in missing})
        write_examples(path, key, known)
    return {part: [e for c in conversations for e in known[c.id]] for part, conversations in parts.items()}


def write_examples(path: Path, key: str, examples: dict[str, list[AnswerExample]]) -> None:
    """``examples`` (conversation id -> its examples) as JSONL: a header line with the key and the
    conversations (one with no question counts as made), then one example a line; ``.gz`` compressed."""
    lines = [json.dumps({"key": key, "conversations": sorted(examples)})]
    lines += [json.dumps(asdict(e), ensure_ascii=False) for conversation in sorted(examples) for e in examples[conversation]]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    with atomic_file(path) as tmp:
        tmp.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)


def read_examples(path: Path) -> tuple[str | None, dict[str, list[AnswerExample]]]:
    """(key, conversation id -> examples) of a file ``write_examples`` wrote; (None, {}) for one of
    another shape (an older run's), a ``ValueError`` naming the file when it is unreadable."""
    try:
        data = path.read_bytes()
        text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
        header, *rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"finetune_answerer: cannot read the examples file {path}: {e}") from None
    if not (isinstance(header, dict) and set(header) == {"key", "conversations"}):
        return None, {}
    examples: dict[str, list[AnswerExample]] = {c: [] for c in header["conversations"]}
    try:
        for row in rows:
            examples[row["conversation_id"]].append(AnswerExample(**{**row, "messages": tuple(row["messages"])}))
    except (KeyError, TypeError) as e:
        raise ValueError(f"finetune_answerer: {path} holds an example of another shape ({e})") from None
    return header["key"], examples


def train(run: Run) -> dict[str, Any]:
    pad = run.tokenizer.pad_token_id
    rng = random.Random(run.settings.seed)
    validation = run.rows["validation"]

    def validate() -> dict[str, Any]:
        with run.accelerator.autocast():  # the precision training runs in (fit validates outside it)
            scores: dict[str, Any] = {"loss": round(mean_completion_loss(run.model, validation, pad), 5)}
        if run.settings.select_on == "answers":  # in full precision, as the adapter is served
            scores.update(generated_scores(run, run.examples["validation"]))
        return scores

    select = (lambda scores: -scores["loss"]) if run.settings.select_on == "loss" else (lambda scores: scores["score"])

    # A final fit (no validation conversation) trains the configured length and keeps the last step.
    return fit(Optimisation(run.model, run.accelerator, run.optimizer, run.scheduler),
               n_steps=total_steps(len(run.rows["train"]), run.settings.optim),
               epoch_batches=lambda: shuffled_batches(run.rows["train"], run.settings.optim.batch_size, rng),
               batch_loss=lambda batch: completion_loss(run.model, batch, pad), save=lambda: save_checkpoint(run),
               log=run.log, validate=validate if validation else None, metric=select,
               patience=run.settings.patience, eval_every=run.settings.eval_every,
               validate_first=bool(validation), progress=run.settings.progress, desc="answerer",
               resume=run.resume, stop_after=run.settings.stop_after)


def generated_scores(run: Run, examples: Sequence[AnswerExample]) -> dict[str, Any]:
    """``examples`` answered by the model as it is now (greedy, at most ``answer_tokens``, the
    answer read as the answer stage reads it) and scored (``answer_scores``); the model is left in
    the mode it was in."""
    model = run.accelerator.unwrap_model(run.model)
    was_training = model.training
    model.eval()
    lm = HFLM.over(run.settings.student, run.tokenizer, model, label="finetune_answerer: the model in training",
                   batch_size=run.settings.optim.batch_size)
    try:
        completions = lm.generate([ChatRequest(e.messages, max_tokens=run.settings.answer_tokens)
                                   for e in examples])
    finally:
        model.train(was_training)
    return {k: round(v, 5) if isinstance(v, float) else v
            for k, v in answer_scores([_answer(c.text) for c in completions], examples).items()}


def _answer(text: str) -> str:
    """The answer in a completion as the answer stage reads it; "" when none is left."""
    try:
        return clean_answer(text)
    except ParseError:
        return ""


def save_checkpoint(run: Run) -> Path:
    """The adapter as it is now, into the run's folder (the best one, as ``fit`` calls it)."""
    folder = run.work / ADAPTER
    run.accelerator.unwrap_model(run.model).save_pretrained(folder)
    return folder


def held_out_loss(run: Run) -> float | None:
    """The best adapter's loss on the evaluation conversations' examples (None: none, or not asked)."""
    if not (run.settings.held_out_loss and run.rows["evaluation"]):
        return None
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    model = run.accelerator.unwrap_model(run.model)
    set_peft_model_state_dict(model, load_file(str(run.work / ADAPTER / ADAPTER_WEIGHTS)))
    with run.accelerator.autocast():
        return round(mean_completion_loss(model, run.rows["evaluation"], run.tokenizer.pad_token_id), 5)


def card(run: Run, summary: dict[str, Any]) -> str:
    """The checkpoint's README: what it is, what it learnt from, how it was selected."""
    curve = [json.loads(line) for line in run.log.path.read_text(encoding="utf-8").splitlines() if line.strip()]
    settings = run.settings
    return f"""# Trained answerer: {settings.student} + LoRA (memlab recipe `finetune_answerer`)

Serve: as the answer stage's LM, one config node over the pipeline it learnt from (`{settings.pipeline}`):
`answerer.lm: {{_component_: memlab.lm.hf.HFLM, model: {settings.student}, adapter: {settings.output_dir}}}`.

- Base model: `{settings.student}` (GGUF, dequantised by transformers), LoRA rank {settings.lora.rank}, alpha
  {settings.lora.alpha}, on {', '.join(settings.lora.target_modules)}.
- Inputs: the answer stage's requests under `{settings.pipeline}` {list(settings.pipeline_overrides or [])}; targets:
  gold (audited where the errata correct it), "Not mentioned in the conversation." for category 5{_share(settings)}.
- Selected on: {_selection(run)}.
- Split by conversation: train {run.split['train']}, validation {run.split['validation']},
  held out {run.split['evaluation']}.
- Examples: {summary['examples']}; dropped as longer than {settings.max_length} tokens: {run.dropped}.
- Steps: {summary['steps']} of batch {settings.optim.batch_size}, lr {settings.optim.lr}; {_kept(summary, curve)}.{_stopped(summary)}
- Weights saved in {summary['adapter_dtype']} (trained in float32; the largest change of a weight by the cast:
  {summary['largest_cast_change']:.1e}).
{_curve(curve)}"""


def _kept(summary: dict[str, Any], curve: list[dict[str, Any]]) -> str:
    if summary["best"] is not None:
        return f"best step {summary['best']['step']}; held-out loss {summary['held_out_loss']}"
    last = next((p["loss"] for p in reversed(curve) if p.get("loss") is not None), None)
    held_out = "no conversation held out, so no held-out loss"
    return held_out if last is None else f"{held_out}; the training loss of its last batch {round(last, 5)}"


def _curve(curve: list[dict[str, Any]]) -> str:
    points = [p for p in curve if "validation" in p]
    if not points:
        return ""
    rows = "\n".join(f"| {p['step']} | {p['validation']['loss']} | {p['validation'].get('score', '-')} |" for p in points)
    return f"\n| step | validation loss | validation answer score |\n|---|---|---|\n{rows}\n"


def _selection(run: Run) -> str:
    if not run.split["validation"]:
        return "nothing: a final fit on every conversation, the configured length, the last step kept"
    return "the validation loss" if run.settings.select_on == "loss" else "the score of the generated validation answers"


def _share(settings: Settings) -> str:
    share = settings.abstention_share
    return "" if share is None else f" (drawn down to at most {share:.0%} of the training examples)"


def _stopped(summary: dict[str, Any]) -> str:
    stopped = summary.get("stopped_after")
    return "" if stopped is None else (f"\n- **Stopped after step {stopped['step']} of {stopped['of']}** (`stop_after`): "
                                       "the schedule was the whole run's, and early stopping had not ended it.")


def main(config: dict[str, Any]) -> dict[str, Any]:
    run = setup(config)
    summary = train(run)
    summary.update(split=run.split, student=run.settings.student,
                   examples={part: len(rows) for part, rows in run.rows.items()}, dropped_too_long=run.dropped,
                   held_out_loss=held_out_loss(run), device=str(run.accelerator.device),
                   torch_threads=torch.get_num_threads())
    adapter = run.work / ADAPTER
    summary.update(adapter_dtype=run.settings.adapter_dtype,
                   largest_cast_change=cast_adapter(adapter, run.settings.adapter_dtype))
    write_json_atomic(adapter / "training.json", {"config": settings_record(run.settings), **summary})
    (adapter / CARD).write_text(card(run, summary), encoding="utf-8")
    swap_in(adapter, run.out)  # only now does output_dir hold the adapter, whole
    shutil.rmtree(run.work)
    return {**summary, "checkpoint": str(run.out)}
