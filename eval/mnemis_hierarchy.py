"""Rebuild the category hierarchy of a saved Mnemis memory with a config's categorizer, and print
what formed: the structure block and each layer's categories with their children.

The base graph is read as saved (no extraction call); only the hierarchy is made again, with the
categorizer, ``compression_ratio``, ``max_layers`` and ``category_batch`` of the config, so
categorizers (prompted, LLM-free, other prompts or models) compare on the same entities.

    memlab run configs/pipelines/mnemis.yaml --data ../shared/data/locomo/locomo10_dev.json --conversations conv-26 \\
        --retrieval-only --save-memory memories/mnemis-conv26
    python eval/mnemis_hierarchy.py memories/mnemis-conv26/conv-26 configs/ablations/mnemis_llm_free_hierarchy.yaml

``--memberships OUT`` also writes a sample of (category, child) pairs to check by reading, one
JSON line each with ``"label": null``; ``eval/hand_check.py`` scores them once labelled. A pair is
right when the category's name says something true and specific of the child as its summary
describes it ("Pets" over "Oliver: Melanie's cat"), wrong when it does not ("Pets" over
"Pottery class") or says nothing of it ("Things").
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from memlab.config import build_pipeline
from memlab.pipelines.mnemis.memory import CATEGORY, MnemisMemory


def layers_text(memory: MnemisMemory, shown: int = 8) -> str:
    lines = []
    for number, layer in enumerate(memory.layers[1:], start=1):
        categories = [n for n in layer if memory.node_type(n) == CATEGORY and memory.graph.node(n)["layer"] == number]
        lines.append(f"layer {number}: {len(categories)} categories, {len(layer) - len(categories)} promoted")
        for category in categories:
            children = [memory.graph.node(c)["name"] for c in memory.children(category)]
            more = f", ... ({len(children)})" if len(children) > shown else ""
            lines.append(f"  {memory.graph.node(category)['name']}: {', '.join(children[:shown])}{more}")
    return "\n".join(lines)


def memberships(memory: MnemisMemory, sample: int, seed: int = 0) -> list[dict]:
    """``sample`` (category, child) pairs drawn at random from every layer, in layer order."""
    pairs = [(memory.graph.node(c)["layer"], c, child) for c in memory.graph.nodes(CATEGORY) for child in memory.children(c)]
    chosen = sorted(random.Random(seed).sample(pairs, min(sample, len(pairs))), key=lambda p: (p[0], p[1], p[2]))
    return [{"layer": layer, "category": memory.node_line(category), "child": memory.node_line(child), "label": None}
            for layer, category, child in chosen]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("memory", type=Path, help="a conversation's folder under --save-memory DIR")
    parser.add_argument("config", help="a Mnemis config whose categorizer and hierarchy settings to use")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--json", type=Path, help="also write the structure block here")
    parser.add_argument("--memberships", type=Path, help="write a sample of (category, child) pairs to label here")
    parser.add_argument("--sample", type=int, default=60, help="pairs in --memberships (default 60)")
    args = parser.parse_args(argv)
    if args.memberships and args.memberships.exists():
        print(f"{args.memberships} exists: labels are never overwritten", file=sys.stderr)
        return 2
    pipeline = build_pipeline(args.config, args.overrides)[0]
    if pipeline.categorizer is None:
        print(f"{args.config}: no categorizer (system2 is off)", file=sys.stderr)
        return 2
    memory = MnemisMemory.load(args.memory, pipeline.embedder)
    memory.counts["rejected_category_replies"] = 0
    pipeline.build_hierarchy(memory)
    structure = pipeline.memory_structure(memory)
    print(layers_text(memory))
    print(json.dumps({k: v for k, v in structure.items() if k not in ("episodes", "facts")}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(structure, indent=1) + "\n", encoding="utf-8")
    if args.memberships:
        rows = memberships(memory, args.sample)
        args.memberships.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
