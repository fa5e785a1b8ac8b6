"""A gradient run that continues after an interruption: ``memlab.training.loop.fit`` writes its state
every ``every`` steps, and after each validation, to one file; a run started again over the same
folder reads it and goes on from that step, as if it had never stopped.

The state is what the next step depends on: the stage's trainable weights (an adapter's, or
every weight a recipe trains), the optimiser's moments, the schedule, torch's random state (the
dropout masks), and the loop's counters (step, epoch, the batches of the epoch already taken,
examples seen, training seconds, early stopping, the best validation). The order of batches is
not stored: an epoch's batches come from the recipe's own seeded generator, so a resumed run
draws the epochs already run again and skips what it took of the current one (``fit``'s
``epoch_batches`` contract). Validation lines already in the metrics log stay (``MetricsLog``
with ``resume``); the best weights were saved by the recipe when they were best.

A state written for another configuration would continue the wrong run: it records the
recipe's ``fingerprint`` (its resolved config), and a different one is refused with the folder named.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memlab.errors import MemlabError
from memlab.fileio import atomic_file
from memlab.training.causal_lm import restore_trainable, trainable_state

STATE_FILE = "resume.pt"


class ResumeError(MemlabError, RuntimeError):
    """A saved training state that cannot continue this run (another config, or unreadable)."""


def config_fingerprint(config: dict[str, Any]) -> str:
    """Identity of a run's configuration, as its saved state records it."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Resumption:
    """Where a run keeps its state (``folder/resume.pt``), how often (``every`` steps), and for
    which configuration (``fingerprint``)."""

    folder: Path
    every: int
    fingerprint: str

    @property
    def path(self) -> Path:
        return Path(self.folder) / STATE_FILE

    def save(self, stage: torch.nn.Module, optimizer: Any, scheduler: Any, progress: dict[str, Any]) -> None:
        """Write the state atomically: an interruption mid-write leaves the previous state."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        state = {"fingerprint": self.fingerprint, "progress": progress, "weights": trainable_state(stage),
                 "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict() if scheduler is not None else None,
                 "torch_rng": torch.get_rng_state()}
        with atomic_file(self.path) as tmp:
            torch.save(state, tmp)

    def load(self, stage: torch.nn.Module, optimizer: Any, scheduler: Any) -> dict[str, Any] | None:
        """Restore a saved state into the run and return its progress; None when there is none."""
        if not self.path.is_file():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=False)
            fingerprint, progress = state["fingerprint"], state["progress"]
        except (OSError, RuntimeError, EOFError, KeyError, TypeError, ValueError, pickle.UnpicklingError) as e:
            raise ResumeError(f"{self.path}: unreadable training state ({type(e).__name__}: {e}); delete it to "
                              "start the run over") from None
        if fingerprint != self.fingerprint:
            raise ResumeError(f"{self.path}: saved by a run with another configuration; use another output_dir, "
                              "or delete the file to start over")
        restore_trainable(stage, state["weights"])
        optimizer.load_state_dict(state["optimizer"])
        if scheduler is not None and state["scheduler"] is not None:
            scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        return progress

    def clear(self) -> None:
        """Forget the state once the run is complete."""
        self.path.unlink(missing_ok=True)
        if Path(self.folder).is_dir() and not os.listdir(self.folder):
            Path(self.folder).rmdir()
