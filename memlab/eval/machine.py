"""The machine a run ran on, recorded in ``metrics.json`` as ``machine`` beside its timings.

A run's seconds are this machine's for the calls it made, and the filling machine's for calls
replayed from the response cache (``cold_latency_s`` adds their recorded seconds): a speed figure
is citable only with the CPU, its vector features and the model backend's build. Workers of a
Ray run may be other machines; this is the driver's.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from memlab.lm.base import LM
from memlab.lm.llamacpp import available_cores

#: CPU features that move a local model's speed (llama.cpp's matrix kernels).
SPEED_FEATURES = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile")


def cpu_description(cpuinfo: str | None = None) -> dict[str, Any]:
    """The CPU's model name and which of ``SPEED_FEATURES`` it has, from ``/proc/cpuinfo``
    (``cpuinfo``: its text; None reads it) or, where there is none, ``platform.processor()``."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text(errors="replace") if path.exists() else ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():  # the first processor's block is enough
        if not line.strip() and fields:
            break
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name") or platform.processor() or None,
            "features": [f for f in SPEED_FEATURES if f in flags] if flags else None}


def machine_identity() -> dict[str, Any]:
    """This machine as a speed figure names it: its CPU and the cores a run may use."""
    return {"cpu": cpu_description(), "cores": available_cores()}


def machine_info(lms: Iterable[LM]) -> dict[str, Any]:
    """This machine (``machine_identity``) and what runs each of ``lms`` (``LM.runtime``), keyed
    by the LM's repr (not its ``name``, which hashes the model file: a retrieval-only run never
    resolves it)."""
    import torch

    return {**machine_identity(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "lms": {repr(lm): runtime for lm in lms if (runtime := lm.runtime())}}
