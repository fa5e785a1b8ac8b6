"""Training memlab's trainable stages: what sits above the pipelines because it drives them.

* ``memlab.training.supervision``: what every family's supervision shares (the split by
  conversation, the questions with evidence, the carded data set);
* ``memlab.training.recipes``: the kit the flat recipes in ``train/`` share, and how
  ``memlab train`` finds and runs them (re-exported here); ``memlab.training.loop``: the
  optimisation loop of the gradient recipes (batches, steps, validation, early stopping);
* ``memlab.training.evaluators``: the evaluator contract (a component a recipe validates with
  and records, ``memlab evaluate-stage`` rebuilds); ``memlab.training.comparison``: stages
  compared under one evaluator, leave-one-conversation-out as an option (``memlab compare-stages``);
* one module per trainable family, holding its supervision, its scores and its evaluator:
  ``rerank`` (and the trained retriever's ``retrieve``), ``route``, ``traversal``, ``distill``,
  ``segmentation`` and ``relations`` (from ``teacher``: CompassMem's prompted construction
  replayed from the response cache), ``navigation`` (the explorer policy's evidence labels on
  built event memories), ``selection`` (Mnemis's System-2 selector on built hierarchies),
  ``fusion`` and ``answering``.
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
    Recipe,
    RecipeSettings,
    adamw,
    encoder_stage,
    evaluator_node,
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
    "Recipe",
    "RecipeSettings",
    "adamw",
    "encoder_stage",
    "evaluator_node",
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
