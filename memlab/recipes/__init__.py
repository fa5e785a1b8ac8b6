"""Training recipes, one module per trainable stage, each a flat script read top to bottom
(``setup``, ``train``, ``save_checkpoint``, ``main``); ``memlab train NAME --config ...`` runs
``memlab.recipes.NAME``'s ``main`` (``memlab.training.recipes.load_recipe``), from a checkout or
an installed package alike. The kit they share is ``memlab.training``; ``train/README.md`` lists
them with their configs and supervision."""
