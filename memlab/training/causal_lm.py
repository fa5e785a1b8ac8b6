"""Supervised LoRA fine-tuning of a local causal LM on (chat messages -> completion) pairs: what the
recipes that teach an LM a stage's replies share (``distill_stage``: a prompted stage's cached
calls; ``finetune_answerer``: the answer stage's requests with gold targets).

An example is tokenised as its prompt (the model's chat template with the generation prompt),
then the completion and the end-of-turn token; the loss is the causal-LM loss on the completion's
tokens alone (the prompt's labels are ``IGNORE_INDEX``), so a step teaches what to reply, not the
prompt. An example longer than the limit is dropped by the caller, never cut: a cut-off target
would teach the model never to stop.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import torch

from memlab.bounds import PositiveFloat, PositiveInt, Range

#: The label that leaves a token out of the loss (transformers' and torch's convention).
IGNORE_INDEX = -100
#: The attention projections of Llama- and Qwen-style decoders.
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass
class LoraSettings:
    """A recipe's ``lora`` section: peft's ``LoraConfig`` (``add_lora``)."""

    rank: PositiveInt = 8
    alpha: PositiveFloat = 16
    dropout: Annotated[float, Range(0, 1, open_max=True)] = 0.05
    target_modules: list[str] = field(default_factory=lambda: list(ATTENTION))


def add_lora(model: Any, rank: int = 8, alpha: float = 16, dropout: float = 0.05,
             target_modules: Sequence[str] = ATTENTION) -> Any:
    """``model`` wrapped in a fresh, trainable peft LoRA adapter (its base weights frozen)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=int(rank), lora_alpha=float(alpha), lora_dropout=float(dropout),
                        target_modules=list(target_modules), task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def recompute_activations(model: Any) -> Any:
    """``model`` (a transformers model, peft-wrapped or not) set to keep each decoder layer's input
    only and recompute the layer in the backward pass: the same loss and gradients (dropout masks
    replayed) for a fraction of the memory. Non-reentrant, so that a frozen embedding's output,
    which needs no gradient, does not cut the adapter's gradients off."""
    settings = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers 5.x's name; v6 drops the old one
    if enable is not None:
        enable(activation_checkpointing_kwargs=settings)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=settings)
    return model


#: The weights file of a peft adapter folder (``save_pretrained``'s safetensors).
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: The dtypes a saved adapter's weights can be written in (``cast_adapter``).
ADAPTER_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def cast_adapter(folder: str | os.PathLike, dtype: str) -> float:
    """Rewrite the peft adapter in ``folder`` (``ADAPTER_WEIGHTS``) with its floating
    weights in ``dtype`` (a name of ``ADAPTER_DTYPES``), atomically; returns the largest absolute
    change of a weight, so that a card can say what the smaller file costs. A LoRA adapter trained
    in fp32 loses nothing measurable in fp16 and halves in size (the repository's files stay
    under 5 MB); peft casts it back to the base model's dtype when it loads it."""
    from safetensors.torch import load_file, save_file

    from memlab.fileio import atomic_file

    if dtype not in ADAPTER_DTYPES:
        raise ValueError(f"adapter dtype {dtype!r}: expected one of {sorted(ADAPTER_DTYPES)}")
    path = Path(folder) / ADAPTER_WEIGHTS
    weights = load_file(str(path))
    cast = {k: v.to(ADAPTER_DTYPES[dtype]) if v.is_floating_point() else v for k, v in weights.items()}
    change = max((float((cast[k].double() - v.double()).abs().max()) for k, v in weights.items()
                  if v.is_floating_point() and v.numel()), default=0.0)
    with atomic_file(path) as tmp:
        save_file({k: v.contiguous() for k, v in cast.items()}, str(tmp), metadata={"format": "pt"})
    return change


def tokenize_pair(tokenizer: Any, messages: Sequence[dict[str, str]], completion: str,
                  max_length: int | None = None) -> dict[str, list[int]] | None:
    """``input_ids`` (prompt, completion, eos) and ``labels`` (the completion and eos only); None
    when longer than ``max_length`` tokens."""
    prompt = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    if max_length is not None and len(prompt_ids) + len(target_ids) > max_length:
        return None
    return {"input_ids": prompt_ids + target_ids, "labels": [IGNORE_INDEX] * len(prompt_ids) + target_ids}


def collate(rows: Sequence[dict[str, list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """A right-padded batch; padding is masked out of attention and loss (training never generates)."""
    width = max(len(r["input_ids"]) for r in rows)
    batch: dict[str, list[list[int]]] = {"input_ids": [], "attention_mask": [], "labels": []}
    for r in rows:
        pad = width - len(r["input_ids"])
        batch["input_ids"].append(r["input_ids"] + [pad_id] * pad)
        batch["attention_mask"].append([1] * len(r["input_ids"]) + [0] * pad)
        batch["labels"].append(r["labels"] + [IGNORE_INDEX] * pad)
    return {k: torch.tensor(v) for k, v in batch.items()}


def completion_loss(model: Any, rows: Sequence[dict[str, list[int]]], pad_id: int) -> torch.Tensor:
    """The mean loss over the completion tokens of ``rows`` (differentiable), as the model's own
    loss over a right-padded batch (``collate``) gives it, but computing the logits of the last
    positions only: the rows are padded on the left, so every completion ends at the batch's
    right edge, and ``logits_to_keep`` covers the longest one. The vocabulary projection of every
    prompt position would cost about a quarter of the forward pass, and at a batch of four
    1,000-token prompts over a 150k vocabulary, gigabytes of logits and their gradients."""
    import torch.nn.functional as F

    width = max(len(r["input_ids"]) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        input_ids[i, width - n:] = torch.tensor(r["input_ids"])
        labels[i, width - n:] = torch.tensor(r["labels"])
        attention[i, width - n:] = 1
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)  # as generation numbers a left-padded row
    keep = max(sum(label != IGNORE_INDEX for label in r["labels"]) for r in rows) + 1
    device = next(model.parameters()).device
    logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                   position_ids=positions.to(device), logits_to_keep=keep).logits
    targets = labels[:, width - keep + 1:].to(device)  # position t predicts token t + 1
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)


@torch.no_grad()
def mean_completion_loss(model: Any, rows: Sequence[dict[str, list[int]]], pad_id: int,
                         batch_size: int = 4) -> float:
    """The loss per completion token over ``rows``, batches weighted by their completion tokens;
    the model is left in the mode it was in."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        n = sum(sum(label != IGNORE_INDEX for label in r["labels"][1:]) for r in chunk)  # the model shifts by one
        total += float(completion_loss(model, chunk, pad_id)) * n
        tokens += n
    model.train(was_training)
    return total / max(tokens, 1)


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of the trainable (adapter) weights: what restoring a step of training needs."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.named_parameters() if v.requires_grad}


@torch.no_grad()
def restore_trainable(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` (``trainable_state``) back into ``model``; a missing or extra name is an error."""
    parameters = {k: v for k, v in model.named_parameters() if v.requires_grad}
    if set(parameters) != set(state):
        missing, extra = sorted(set(parameters) - set(state)), sorted(set(state) - set(parameters))
        raise ValueError(f"trainable weights do not match the model's (missing {missing[:3]}, extra {extra[:3]})")
    for name, value in state.items():
        parameters[name].copy_(value)
