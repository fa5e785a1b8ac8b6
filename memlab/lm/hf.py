"""Local transformers causal LMs: batched chat generation with left padding.

``model`` is a local folder saved by ``save_pretrained`` (weights + tokenizer with a chat
template), a path to a .gguf file, or a known GGUF name (``memlab.lm.models``); GGUF files
are loaded through transformers' ``gguf_file`` support (dequantized; needs the ``gguf``
package). Nothing is ever fetched from a hub (``local_files_only``). ``adapter`` is a LoRA
adapter folder saved by peft (a trained answerer, ``memlab.training.answering``) applied over
the model; the LM's name, and so its cache entries, carry the adapter's content identity (the
files peft loads, ``ADAPTER_FILES``: not its card or training record).

Requests that share sampling settings (temperature, max_tokens, stop, seed) are batched,
``batch_size`` at a time. Temperature 0 is greedy decoding; otherwise sampling is seeded
with the request's seed without touching the global RNG. ``json_schema`` is not enforced
(the stage's parser validates). A completion's ``latency_s`` is its batch's wall time
divided by the batch size, so latencies add up to the time spent.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any, Literal

from memlab.bounds import PositiveInt
from memlab.clock import active_seconds
from memlab.fileio import recorded_split
from memlab.lm.base import LM
from memlab.lm.errors import LMUnavailableError, PromptTooLongError
from memlab.lm.models import KNOWN_MODELS, model_fingerprint, resolve_model
from memlab.lm.types import ChatRequest, Completion


def _folder_fingerprint(folder: Path, pattern: str = "*") -> str:
    """Content identity of the files ``pattern`` matches in a saved model folder: small files in
    full, weights by size and head."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob(pattern) if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode())
        size = path.stat().st_size
        digest.update(str(size).encode())
        with path.open("rb") as f:
            digest.update(f.read(1 << 20))
    return digest.hexdigest()[:16]


#: The files of a peft adapter folder that peft loads (its config and weights): the adapter's
#: identity. Its card and training record beside them are documentation; editing them must not
#: re-key the adapter's cached answers.
ADAPTER_FILES = "adapter_*"


class HFLM(LM):
    """A transformers causal LM with a chat template (see the module docstring)."""

    def __init__(
        self,
        model: str,
        device: str = "cpu",
        dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto",
        batch_size: PositiveInt = 8,
        cache: str | None = "default",
        adapter: str | None = None,
    ) -> None:
        super().__init__(cache=cache)
        self.model = model
        self.adapter = adapter
        self.device = device
        self.dtype = dtype
        self.batch_size = batch_size
        self._tokenizer: Any = None
        self._model: Any = None
        self._config: Any = None
        self._name: str | None = None
        self._lock = threading.RLock()

    @classmethod
    def over(cls, model: str, tokenizer: Any, weights: Any, label: str, batch_size: int = 8) -> HFLM:
        """An HFLM that generates with ``weights`` already in memory (``model`` names where their
        config comes from): a recipe scoring the model it is training. It has no response cache,
        since the weights change between calls, and ``label`` is its name."""
        lm = cls(model, batch_size=batch_size, cache=None)
        lm._tokenizer, lm._model, lm._name = tokenizer, weights, label
        return lm

    def _source(self) -> tuple[Path, str | None]:
        """(folder, gguf file name or None)."""
        path = Path(self.model).expanduser()
        if path.is_dir():
            return path, None
        if self.model in KNOWN_MODELS or path.is_file() or path.suffix.lower() == ".gguf":
            gguf = resolve_model(self.model)
            return gguf.parent, gguf.name
        raise LMUnavailableError(f"HFLM: {self.model!r} is neither a model folder, a .gguf file nor a known model name")

    def runtime(self) -> dict[str, Any]:
        """The device the model runs on and torch's CPU threads (its speed, not its output)."""
        import torch

        return {"backend": "transformers", "device": self.device, "torch_threads": torch.get_num_threads()}

    @property
    def name(self) -> str:
        if self._name is None:
            folder, gguf = self._source()
            if gguf is None:
                label, fingerprint = folder.name, _folder_fingerprint(folder)
            else:
                label, fingerprint = Path(gguf).stem, model_fingerprint(folder / gguf)
            self._name = f"hf:{label}@{fingerprint}:{self.dtype}"
            if self.adapter is not None:
                self._name += f"+lora@{_folder_fingerprint(self._adapter_folder(), ADAPTER_FILES)}"
        return self._name

    @property
    def trained_weights(self) -> Path | None:
        return None if self.adapter is None else self._adapter_folder()

    @property
    def trained_on(self) -> frozenset[str]:
        """The train and validation conversations of the adapter's training record (its recipe's,
        ``memlab.recipes.finetune_answerer``); none without one."""
        folder = self.trained_weights
        try:
            return frozenset() if folder is None else recorded_split(folder)
        except ValueError as e:
            raise LMUnavailableError(f"HFLM: {e}") from None

    def _adapter_folder(self) -> Path:
        folder = Path(str(self.adapter)).expanduser()
        if not (folder / "adapter_config.json").is_file():
            raise LMUnavailableError(f"HFLM: {self.adapter!r} is not a peft adapter folder (no adapter_config.json)")
        return folder

    @property
    def context_window(self) -> int:  # type: ignore[override]
        config = self._load_config()
        return int(getattr(config, "max_position_embeddings", None) or 4096)

    def _load_config(self) -> Any:
        with self._lock:
            if self._config is None:
                from transformers import AutoConfig

                folder, gguf = self._source()
                try:
                    self._config = AutoConfig.from_pretrained(folder, gguf_file=gguf, local_files_only=True)
                except (OSError, ValueError) as exc:
                    raise LMUnavailableError(f"HFLM: cannot read the model config in {folder}: {exc}") from None
            return self._config

    def warm_up(self) -> None:
        self._load()

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._model is not None:
                return self._tokenizer, self._model
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            folder, gguf = self._source()
            try:
                tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(
                    folder, gguf_file=gguf, local_files_only=True, **_dtype_kwarg(self.dtype)
                )
            except (OSError, ValueError, ImportError) as exc:
                raise LMUnavailableError(f"HFLM: cannot load the model in {folder}: {exc}") from None
            if self.adapter is not None:
                from peft import PeftModel

                adapter = self._adapter_folder()
                try:
                    model = PeftModel.from_pretrained(model, str(adapter), is_trainable=False)
                except (OSError, ValueError, KeyError, RuntimeError) as exc:
                    raise LMUnavailableError(f"HFLM: cannot apply the adapter in {adapter}: {exc}") from None
            if not tokenizer.chat_template:
                raise LMUnavailableError(f"HFLM: the tokenizer in {folder} has no chat template")
            tokenizer.padding_side = "left"  # generation continues from the right end of every row
            if tokenizer.pad_token_id is None:
                tokenizer.pad_token = tokenizer.eos_token
            if tokenizer.pad_token_id is None:
                raise LMUnavailableError(f"HFLM: the tokenizer in {folder} has neither a pad nor an eos token")
            model.to(torch.device(self.device)).eval()
            self._tokenizer, self._model = tokenizer, model
            return tokenizer, model

    def loaded(self) -> tuple[Any, Any]:
        """The tokenizer and the model, loaded (what a recipe fine-tunes)."""
        return self._load()

    def count_tokens(self, text: str) -> int:
        tokenizer, _ = self._load()
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    @property
    def requests_at_once(self) -> int:
        return self.batch_size

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        tokenizer, model = self._load()
        results: list[Completion | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((r.temperature, r.max_tokens, r.stop, r.seed), []).append(i)
        for indices in groups.values():
            for start in range(0, len(indices), self.batch_size):
                chunk = indices[start : start + self.batch_size]
                for i, completion in zip(chunk, self._batch(tokenizer, model, [requests[i] for i in chunk])):
                    results[i] = completion
        return results  # type: ignore[return-value]

    def _batch(self, tokenizer: Any, model: Any, batch: list[ChatRequest]) -> list[Completion]:
        import torch

        first = batch[0]  # the batch shares its sampling settings
        prompts = [
            tokenizer.apply_chat_template(list(r.messages), tokenize=False, add_generation_prompt=True) for r in batch
        ]
        encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        # Only what every causal LM takes (a BERT-style tokenizer adds token_type_ids).
        encoded = {key: encoded[key] for key in ("input_ids", "attention_mask")}
        prompt_lengths = encoded["attention_mask"].sum(dim=1).tolist()
        limit = self.context_window
        if max(prompt_lengths) >= limit:
            raise PromptTooLongError(
                f"{self.name}: a prompt of {max(prompt_lengths)} tokens does not fit the context window of {limit}"
            )
        kwargs: dict[str, Any] = {
            "max_new_tokens": min(first.max_tokens, limit - max(prompt_lengths)),
            "pad_token_id": tokenizer.pad_token_id,
            "do_sample": first.temperature > 0,
        }
        if first.temperature > 0:
            kwargs["temperature"] = first.temperature
        else:  # greedy: drop sampling settings a generation_config may carry
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if first.stop:
            kwargs.update(stop_strings=list(first.stop), tokenizer=tokenizer)
        encoded = {key: value.to(model.device) for key, value in encoded.items()}
        with self._lock, torch.inference_mode(), torch.random.fork_rng(devices=_cuda_devices(model)):
            if first.temperature > 0 and first.seed is not None:
                torch.manual_seed(first.seed)
            start = active_seconds()
            output = model.generate(**encoded, **kwargs)
            elapsed = active_seconds() - start
        generated = output[:, encoded["input_ids"].shape[1] :].tolist()
        eos_ids = _eos_ids(model, tokenizer)
        completions = []
        for request, ids, prompt_tokens in zip(batch, generated, prompt_lengths):
            end = next((k + 1 for k, t in enumerate(ids) if t in eos_ids), None)
            finish = "length" if end is None else "stop"
            ids = ids if end is None else ids[:end]
            text = tokenizer.decode(ids, skip_special_tokens=True)
            cut = min((text.find(s) for s in request.stop if s in text), default=-1)
            if cut >= 0:
                text, finish = text[:cut], "stop"
            completions.append(
                Completion(
                    text=text,
                    prompt_tokens=int(prompt_tokens),
                    completion_tokens=len(ids),
                    latency_s=elapsed / len(batch),
                    model=self.name,
                    finish_reason=finish,
                )
            )
        return completions

    def __repr__(self) -> str:
        adapter = f", adapter={self.adapter!r}" if self.adapter is not None else ""
        return f"HFLM(model={self.model!r}, device={self.device!r}, dtype={self.dtype!r}{adapter})"


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def _cuda_devices(model: Any) -> list[int]:
    device = model.device
    return [device.index or 0] if device.type == "cuda" else []


def _dtype_kwarg(dtype: str) -> dict[str, Any]:
    import torch
    import transformers

    value: Any = dtype if dtype == "auto" else getattr(torch, dtype)
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    # ``torch_dtype`` was renamed ``dtype`` in transformers 4.56.
    return {"dtype": value} if (major, minor) >= (4, 56) else {"torch_dtype": value}
