"""Train one stage per held-out conversation: leave-one-conversation-out (issue 25).

    python eval/train_loco.py finetune_retriever --config configs/train/retriever.yaml \
        --data ../shared/data/locomo/locomo10_dev.json --out runs/retrievers [key=value ...]

For each conversation C of the data file (or ``--conversations``), the recipe runs with C held
out (``data.eval_ids=[C]``), the conversation after C in that order set aside for early stopping
(``data.validation_ids``), and the rest for training; the checkpoint goes to ``OUT/C``. Every
conversation is thus scored (``eval/retrieval_table.py ...loco=OUT``, ``eval/router_loco.py
--trained OUT``) by a stage that never trained or selected on it. A fold whose checkpoint
already has its ``training.json`` is skipped, so an interrupted run resumes. ``OUT/loco.json``
collects each fold's summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlab.data import load_dataset, select_conversations
from memlab.training import load_recipe_config, run_recipe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--config", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--conversations", help="comma-separated ids (default: every conversation of --data)")
    parser.add_argument("--out", required=True)
    parser.add_argument("overrides", nargs="*", help="key=value, as for memlab train")
    args = parser.parse_intermixed_args(argv)
    conversations = load_dataset(args.data)
    if args.conversations:
        conversations = select_conversations(conversations, args.conversations.split(","), source=args.data)
    ids = [c.id for c in conversations]
    if len(ids) < 3:
        parser.error("leave-one-out with a validation conversation needs at least 3 conversations")
    out = Path(args.out)
    summaries = {}
    for i, held in enumerate(ids):
        validation = ids[(i + 1) % len(ids)]
        folder = out / held
        if (folder / "training.json").is_file():
            record = json.loads((folder / "training.json").read_text())
            summaries[held] = {k: v for k, v in record.items() if k != "config"}
            continue
        config = load_recipe_config(args.config, [*args.overrides, f"output_dir={folder}", f"data.path={args.data}",
                                                  f"data.eval_ids=[{held}]", f"data.validation_ids=[{validation}]",
                                                  f"data.conversations=[{','.join(ids)}]"])
        if config["recipe"] != args.recipe:
            parser.error(f"{args.config} is a config for recipe {config['recipe']!r}, not {args.recipe!r}")
        summaries[held] = run_recipe(args.recipe, config)
        print(json.dumps({"held_out": held, "evaluation": summaries[held].get("evaluation")}, default=str), flush=True)
    (out / "loco.json").write_text(json.dumps(summaries, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
