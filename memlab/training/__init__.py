"""Training memlab's trainable stages: what sits above the pipelines because it drives them.

* ``memlab.training.supervision``: labelled data sets derived from LoCoMo-format
  conversations, split by conversation (it builds memories and runs stages to derive them);
* ``memlab.training.recipes``: the kit the flat recipes in ``train/`` share, and how
  ``memlab train`` finds and runs them (re-exported here); ``memlab.training.loop``: the
  optimisation loop of the gradient recipes (batches, steps, validation, early stopping);
* ``memlab.training.evaluators``: one evaluator per trainable family (a component a recipe
  validates with and records, ``memlab evaluate-stage`` rebuilds); ``memlab.training.stage_eval``
  the reranker and router scores they compute; ``memlab.training.comparison``: stages compared
  under one evaluator, leave-one-conversation-out as an option (``memlab compare-stages``);
* ``memlab.training.teacher``: CompassMem's prompted construction replayed from the response
  cache (the teacher labels), and from it ``memlab.training.segmentation`` (event boundaries)
  and ``memlab.training.relations`` (event-pair relations); ``memlab.training.navigation``:
  the explorer policy's evidence labels on built event memories; ``memlab.training.selection``:
  Mnemis's System-2 selector's evidence labels on built hierarchies, and its evaluation.
"""

from __future__ import annotations

from memlab.training.recipes import (
    REQUIRED_KEYS,
    ConversationSettings,
    ConversationSplit,
    DataSettings,
    EarlyStopping,
    GradientSettings,
    MetricsLog,
    Optimiser,
    PipelineSettings,
    Recipe,
    RecipeSettings,
    adamw,
    encoder_stage,
    linear_schedule,
    load_recipe,
    load_recipe_config,
    make_accelerator,
    prepare_training,
    recipe_conversations,
    recipe_path,
    recipe_settings,
    record_training,
    run_recipe,
    seed_everything,
    settings_record,
    start_recipe,
    total_steps,
    training_conversations,
)

__all__ = [
    "REQUIRED_KEYS",
    "ConversationSettings",
    "ConversationSplit",
    "DataSettings",
    "EarlyStopping",
    "GradientSettings",
    "MetricsLog",
    "Optimiser",
    "PipelineSettings",
    "Recipe",
    "RecipeSettings",
    "adamw",
    "encoder_stage",
    "linear_schedule",
    "training_conversations",
    "load_recipe",
    "load_recipe_config",
    "make_accelerator",
    "prepare_training",
    "recipe_conversations",
    "recipe_path",
    "recipe_settings",
    "record_training",
    "run_recipe",
    "seed_everything",
    "settings_record",
    "start_recipe",
    "total_steps",
]
