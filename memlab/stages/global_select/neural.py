"""Trained global selector: Mnemis's System-2 selection (2.3) with no LLM call.

Each node of a level is scored against the question on its own: a frozen (or LoRA-tuned)
``TextEncoder`` embeds the question and the node's card, ``name [tags]: summary`` (a category's
summary lists its children's names; the key is never read), and a small head reads the pair as
``(q * n, |q - n|, cos(q, n), layer one-hot)`` and gives two logits:

* **select**: descend into this node (a category) or keep it (an entity);
* **all children**: the prompt's ``get_all_children`` (take everything below without asking
  again); only read for a category.

Decision: the nodes whose select probability reaches ``select_threshold``, best first, at most
``max_selected`` per call; when none does, the ``min_selected`` best (0: the descent may stop
with nothing, as the prompted selector's may). A selected category takes all its children when
its second probability reaches ``all_children_threshold``.

Why a bi-encoder over fixed vectors: a level holds up to ``selection_batch`` nodes and a
descent a few levels, so one question scores some 50-150 nodes; a cross-encoder would run the
encoder once per (question, node) pair. Here a node's vector is computed once per memory (an LRU
cache of ``cache_size`` texts while the encoder is frozen), so a question costs one encoder pass
and the head.

Training API: ``node_logits(items)`` (differentiable ``[nodes, 2]`` per item), ``loss(logits,
targets)`` over ``SelectionTarget``s (binary cross-entropy on select for every node, on all
children for the categories), ``probabilities(items)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from memlab.bounds import NonNegativeInt, PositiveInt, UnitFloat
from memlab.stages.encoder import EncoderStage, TextEncoder, VectorCache
from memlab.stages.global_select.base import (
    GlobalSelectIn,
    GlobalSelector,
    GlobalSelectOut,
    HierarchyNode,
    checked_selections,
)


def node_text(node: HierarchyNode) -> str:
    """What the selector reads of a node: ``name [tags]: summary`` (no key)."""
    tags = f" [{', '.join(node.tags)}]" if node.tags else ""
    summary = node.summary.partition(": ")[2] if node.layer and node.summary.startswith(f"{node.name}: ") \
        else node.summary
    return f"{node.name}{tags}: {summary}" if summary else f"{node.name}{tags}"


@dataclass(frozen=True)
class SelectionTarget:
    """What one call should have chosen: per node of ``GlobalSelectIn.nodes``, select or not and
    take all its children or not (ignored for entities)."""

    select: tuple[bool, ...]
    all_children: tuple[bool, ...]

    def __post_init__(self) -> None:
        if len(self.select) != len(self.all_children):
            raise ValueError(f"SelectionTarget: {len(self.select)} select flags vs {len(self.all_children)} "
                             "all-children flags")


class TrainedGlobalSelector(EncoderStage, GlobalSelector):
    """Scores each node of a level against the question (module docstring). A frozen
    ``encoder`` (the recipe's setting) keeps the packaged MiniLM and trains the head alone; ``max_layer`` bounds the layer
    one-hot (deeper layers share its last slot)."""

    def __init__(
        self,
        encoder: TextEncoder,
        hidden: PositiveInt = 128,
        max_layer: PositiveInt = 4,
        select_threshold: UnitFloat = 0.5,
        all_children_threshold: UnitFloat = 0.5,
        max_selected: PositiveInt = 8,
        min_selected: NonNegativeInt = 1,
        batch_size: PositiveInt = 64,
        cache_size: NonNegativeInt = 20000,
        device: str = "cpu",
    ) -> None:
        super().__init__()
        if min_selected > max_selected:
            raise ValueError(f"TrainedGlobalSelector: min_selected {min_selected} > max_selected {max_selected}")
        self.encoder = encoder
        self.hidden = hidden
        self.max_layer = max_layer
        self.select_threshold = select_threshold
        self.all_children_threshold = all_children_threshold
        self.max_selected = max_selected
        self.min_selected = min_selected
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.device = device
        self.head: nn.Module | None = None
        # text -> vector of the frozen encoder (never stale: its weights do not change)
        self._cache = VectorCache(cache_size)

    def _build_heads(self, hidden_size: int) -> None:
        self.head = nn.Sequential(nn.Linear(2 * hidden_size + 1 + self.max_layer + 1, self.hidden), nn.GELU(),
                                  nn.Linear(self.hidden, 2))

    # -- encoding --------------------------------------------------------------------------
    def vectors(self, texts: list[str]) -> torch.Tensor:
        """Unit vectors ``[len(texts), hidden_size]``; a frozen encoder's come from the cache."""
        if not self.encoder.frozen or self.cache_size == 0:
            return F.normalize(self.encode_texts(texts), dim=-1)
        found = self._cache.lookup(texts, lambda part: F.normalize(self.encode_texts(part), dim=-1),
                                   self.batch_size)
        return torch.stack(found) if found else torch.zeros(0, self.encoder.hidden_size, device=self.device)

    # -- training API ----------------------------------------------------------------------
    def node_logits(self, items: list[GlobalSelectIn]) -> list[torch.Tensor]:
        """Per item, logits ``[len(nodes), 2]`` (select, all children); differentiable in the
        head (and the encoder when it trains)."""
        self.warm_up()
        texts = [item.question for item in items] + [node_text(n) for item in items for n in item.nodes]
        distinct = list(dict.fromkeys(texts))
        index = {text: i for i, text in enumerate(distinct)}
        vectors = self.vectors(distinct)
        out, offset = [], len(items)
        for i, item in enumerate(items):
            rows = [index[texts[offset + j]] for j in range(len(item.nodes))]
            offset += len(item.nodes)
            nodes = vectors[rows] if rows else vectors[:0]
            question = vectors[index[item.question]].expand_as(nodes)
            layers = torch.tensor([min(n.layer, self.max_layer) for n in item.nodes], device=nodes.device,
                                  dtype=torch.long)
            features = [question * nodes, (question - nodes).abs(), (question * nodes).sum(-1, keepdim=True),
                        F.one_hot(layers, self.max_layer + 1).to(nodes.dtype)]
            out.append(self.head(torch.cat(features, dim=-1)))
        return out

    def loss(self, logits: list[torch.Tensor], targets: list[SelectionTarget], items: list[GlobalSelectIn],
             positive_weight: float = 1.0) -> torch.Tensor:
        """Binary cross-entropy on select for every node (positives weighted by
        ``positive_weight``: most nodes of a level are not chosen), plus on all children for the
        categories (``layer > 0``), each averaged over its nodes."""
        if not (len(logits) == len(targets) == len(items)) or any(
                len(lg) != len(t.select) or len(t.select) != len(i.nodes) for lg, t, i in zip(logits, targets, items)):
            raise ValueError("TrainedGlobalSelector.loss: one target per item and one flag per node")
        flat = torch.cat(logits)
        device, dtype = flat.device, flat.dtype
        select = torch.tensor([s for t in targets for s in t.select], dtype=dtype, device=device)
        take_all = torch.tensor([a for t in targets for a in t.all_children], dtype=dtype, device=device)
        category = torch.tensor([n.layer > 0 for i in items for n in i.nodes], dtype=torch.bool, device=device)
        loss = F.binary_cross_entropy_with_logits(flat[:, 0], select, weight=1.0 + (positive_weight - 1.0) * select)
        if category.any():
            loss = loss + F.binary_cross_entropy_with_logits(flat[category, 1], take_all[category])
        return loss

    # -- the stage -------------------------------------------------------------------------
    def probabilities(self, items: list[GlobalSelectIn]) -> list[torch.Tensor]:
        """Per item, ``[len(nodes), 2]`` probabilities (select, all children), in eval mode."""
        with self.inference():
            return [logits.float().sigmoid() for logits in self.node_logits(items)]

    def forward(self, batch: list[GlobalSelectIn]) -> list[GlobalSelectOut]:
        asked = [item for item in batch if item.nodes]
        probabilities = iter(self.probabilities(asked) if asked else [])
        out = []
        for item in batch:
            if not item.nodes:
                out.append(GlobalSelectOut())
                continue
            p = next(probabilities)
            order = sorted(range(len(item.nodes)), key=lambda i: -p[i, 0].item())
            chosen = [i for i in order if p[i, 0].item() >= self.select_threshold][:self.max_selected]
            chosen = chosen or order[:self.min_selected]
            out.append(GlobalSelectOut(checked_selections(
                [(item.nodes[i].key, item.nodes[i].layer > 0 and p[i, 1].item() >= self.all_children_threshold)
                 for i in chosen], item)))
        return out
