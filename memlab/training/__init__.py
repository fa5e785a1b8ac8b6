"""Training memlab's trainable stages: what sits above the pipelines because it drives them.

* ``memlab.training.supervision``: labelled data sets derived from LoCoMo-format
  conversations, split by conversation (it builds memories and runs stages to derive them);
* ``memlab.training.recipes``: the kit the flat recipes in ``train/`` share, and how
  ``memlab train`` finds and runs them (re-exported here); ``memlab.training.loop``: the
  optimisation loop of the gradient recipes (batches, steps, validation, early stopping);
* ``memlab.training.stage_eval``: a reranker or router scored on its own, without an LLM;
* ``memlab.training.teacher``: CompassMem's prompted construction replayed from the response
  cache (the teacher labels), and from it ``memlab.training.segmentation`` (event boundaries)
  and ``memlab.training.relations`` (event-pair relations); ``memlab.training.navigation``:
  the explorer policy's evidence labels on built event memories; ``memlab.training.selection``:
  Mnemis's System-2 selector's evidence labels on built hierarchies, and its evaluation.
"""

from __future__ import annotations

from memlab.training.recipes import (
                                     DATA_DEFAULTS,
                                     REQUIRED_KEYS,
                                     EarlyStopping,
                                     MetricsLog,
                                     Recipe,
                                     adamw,
                                     linear_schedule,
                                     load_conversations,
                                     load_recipe,
                                     load_recipe_config,
                                     make_accelerator,
                                     recipe_conversations,
                                     recipe_path,
                                     record_training,
                                     run_recipe,
                                     seed_everything,
                                     total_steps,
                                     with_defaults,
)

__all__ = [
    "DATA_DEFAULTS",
    "REQUIRED_KEYS",
    "EarlyStopping",
    "MetricsLog",
    "Recipe",
    "adamw",
    "linear_schedule",
    "load_conversations",
    "load_recipe",
    "load_recipe_config",
    "make_accelerator",
    "recipe_conversations",
    "record_training",
    "recipe_path",
    "run_recipe",
    "seed_everything",
    "total_steps",
    "with_defaults",
]
