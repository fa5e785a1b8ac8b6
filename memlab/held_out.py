"""What trained weights learnt from, and the refusal to score them there.

A trained stage's checkpoint records the conversations it was trained or validated on
(``training.json``'s split, or ``trained_on`` in its manifest), and so does an LM's trained
adapter. ``trained_conversations`` collects those records from any module holding stages,
``unrecorded_checkpoints`` names weights that have none, and ``refuse_training_overlap`` is the
one refusal every command, recipe and script applies before scoring (``--allow-training-overlap``
lifts it): no trained stage is scored on conversations it learnt from.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from memlab.checkpoint import TRAINING_FILE
from memlab.lm.base import LM
from memlab.stage import Stage
from memlab.types import Conversation


def unrecorded_checkpoints(module: nn.Module) -> list[str]:
    """The checkpoint folders of stages in ``module`` (and the adapter folders of their LMs) that
    hold weights but no record of what they learnt from (no ``training.json``, no ``trained_on`` in the manifest): nothing can show that
    they are not scored on their own training conversations. A stage saved untrained declares it
    with a ``training.json`` whose split is empty."""
    stages = {str(sub.loaded_from) for sub in module.modules()
              if isinstance(sub, Stage) and sub.__dict__.get("_unrecorded_weights")}
    lms = {str(lm.trained_weights) for lm in _trained_lms(module)
           if not lm.trained_on and not (lm.trained_weights / TRAINING_FILE).exists()}
    return sorted(stages | lms)


def trained_conversations(module: nn.Module) -> dict[str, frozenset[str]]:
    """The conversations each trained stage in ``module`` (a stage, a pipeline, any module
    holding stages), and each trained adapter of an LM a stage holds, was trained or validated
    on, keyed by the checkpoint or adapter folder it was loaded from (else its module name):
    scores on those conversations are not held-out scores.
    Stages that record none are left out, so ``{}`` means no stage learnt from any."""
    found: dict[str, frozenset[str]] = {}
    for name, sub in module.named_modules():
        if isinstance(sub, Stage) and sub.trained_on:
            key = str(sub.loaded_from) if sub.loaded_from is not None else (name or type(sub).__name__)
            found[key] = found.get(key, frozenset()) | sub.trained_on
    for lm in _trained_lms(module):
        if lm.trained_on:
            found[str(lm.trained_weights)] = found.get(str(lm.trained_weights), frozenset()) | lm.trained_on
    return found


def _trained_lms(module: nn.Module) -> list[LM]:
    """The LMs with trained weights (an answer adapter) that stages of ``module`` hold: an LM is
    not a module, so it is found as a stage's attribute."""
    found = {id(value): value for sub in module.modules() if isinstance(sub, Stage)
             for value in vars(sub).values() if isinstance(value, LM) and value.trained_weights is not None}
    return list(found.values())


def training_overlap(module: nn.Module, conversations: Sequence[Conversation | str]) -> dict[str, list[str]]:
    """Per trained stage of ``module`` (a pipeline, a stage), the ``conversations`` (or their ids)
    its checkpoint learnt from."""
    ids = [c if isinstance(c, str) else c.id for c in conversations]
    overlap = {stage: [i for i in ids if i in seen] for stage, seen in trained_conversations(module).items()}
    return {stage: found for stage, found in overlap.items() if found}


def refuse_training_overlap(module: nn.Module, conversations: Sequence[Conversation | str], allow: bool) -> None:
    """A ValueError naming them when trained stages of ``module`` would be scored on
    ``conversations`` (or their ids: checked before the data is read) they learnt from, or when
    it holds trained weights with no record of what they learnt from, unless ``allow``
    (``--allow-training-overlap``). The one refusal every command and script applies."""
    unrecorded = unrecorded_checkpoints(module)
    if unrecorded and not allow:
        raise ValueError(
            f"{', '.join(unrecorded)}: trained weights without a record of the conversations they learnt from "
            "(no training.json, no trained_on in the manifest), so a score could be on training data: train it "
            "with a recipe, or pass --allow-training-overlap to run anyway")
    overlap = training_overlap(module, conversations)
    if overlap and not allow:
        raise ValueError(
            "trained stages would be scored on conversations they learnt from ("
            + "; ".join(f"{stage}: {', '.join(ids)}" for stage, ids in overlap.items())
            + "): choose other conversations, or pass --allow-training-overlap to run anyway")
