"""Trained explorer policy: CompassMem's explorer decision (Eq. 9-10) with no LLM.

A siamese ``TextEncoder`` (MiniLM + optional LoRA) embeds every text once: the question, the
subgoals and each event as ``[7 May 2023] (Ann, Bob) summary`` (its key and provenance are
not read). A pair (query ``a``, event ``b``) becomes ``z = pair([a * b, |a - b|, cos(a, b)])``,
and small heads read it:

* ``relevance(z)``: the event holds what the query asks. For (question, node) it is the node's
  relevance; for (subgoal j, node) it decides whether the node satisfies subgoal j.
* ``route([z, relation])``: a neighbour, with the relation label of its edge (one-hot over
  ``RELATION_LABELS`` x direction), leads toward what the query asks. A neighbour's score is the
  maximum over the question and the open subgoals.
* ``action([z(question, node), features])``: SKIP / EXPAND / ANSWER, from the (question, node)
  pair and ten scalar features of the state (``FEATURES``): the node's relevance to the
  question and to the open subgoals, the fraction of subgoals satisfied before and (softly)
  after this node, the number of kept nodes, the best relevance of a kept node and the node's
  similarity to the kept nodes (is it redundant?), the number of neighbours and the best
  neighbour score.

Decision: the arg-max action; ``next_nodes`` = neighbours whose route probability exceeds
``next_threshold``, best first, at most ``max_next``; ``satisfied`` = open subgoals whose
relevance probability to the node exceeds ``satisfied_threshold`` (none for SKIP), through
``checked_decision``.

Why siamese and not a cross-encoder: every (query, text) pair of a cross-encoder is a full
encoder pass, and a decision reads 1 + subgoals + neighbours + kept pairs (some 10-20, each
~10 ms on one CPU core). Here a text is encoded once and, at inference, kept in an LRU cache
(``cache_size`` texts, dropped when the encoder's weights change), so the events of a memory
are encoded once for all the questions asked of it and a decision costs the heads alone
(well under a millisecond) plus the texts it has not met before.

Training API: ``logits(items)`` (``ExplorerLogits``, differentiable) and ``loss(logits,
targets)`` over ``ExplorerTarget``s (the action; the positive next nodes; the subgoals this
node satisfies): action cross-entropy + binary cross-entropies for node relevance (target:
the action keeps the node), subgoal satisfaction and next nodes. A frozen ``encoder`` trains the
heads only, on cached embeddings (fast on a CPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from memlab.bounds import NonNegativeInt, PositiveInt, UnitFloat
from memlab.dates import format_day
from memlab.stages.encoder import EncoderStage, TextEncoder, VectorCache
from memlab.stages.event_view import EventView
from memlab.stages.navigate.base import ACTIONS, NavigateIn, NavigateOut, Navigator, checked_decision
from memlab.stages.relate.base import RELATION_LABELS, normalise_label

#: The scalar state features the action head reads (module docstring), in order.
FEATURES: tuple[str, ...] = (
    "node_relevance", "open_subgoal_relevance", "satisfied_before", "satisfied_after", "kept_count",
    "kept_relevance", "kept_similarity", "neighbour_count", "neighbour_best", "node_cosine",
)
#: One slot per (label, direction): an edge leaving the node, then one entering it.
RELATION_SLOTS = len(RELATION_LABELS) * 2


def view_text(view: EventView) -> str:
    """What the policy reads of an event: ``[7 May 2023] (Ann, Bob) summary`` (no key, no provenance)."""
    parts = [f"[{format_day(view.date)}]"] if view.date is not None else []
    if view.participants:
        parts.append(f"({', '.join(view.participants)})")
    return " ".join([*parts, view.summary])


def relation_slot(relation: str) -> int:
    """The one-hot slot of a neighbour's relation: ``causal`` leaves the node, ``causal (from)``
    (``EventMemory``'s spelling) or ``<- causal`` enters it; the label is normalised."""
    text = relation.strip()
    incoming = text.endswith("(from)") or text.startswith("<-")
    label = normalise_label(text.removesuffix("(from)").removeprefix("<-").strip())
    return RELATION_LABELS.index(label) + (len(RELATION_LABELS) if incoming else 0)


@dataclass(frozen=True)
class ExplorerTarget:
    """What a decision should have been: the action, the neighbour keys worth visiting and the
    0-based subgoals this node satisfies."""

    action: str
    next_nodes: tuple[str, ...] = ()
    satisfied: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"ExplorerTarget: action must be one of {ACTIONS}, got {self.action!r}")


@dataclass
class ExplorerLogits:
    """Differentiable outputs for a batch: ``action [B, 3]`` (order of ``ACTIONS``), ``relevance
    [B]`` (question vs node), and per item ``satisfied [len(subgoals)]`` and ``next [len(neighbours)]``."""

    action: torch.Tensor
    relevance: torch.Tensor
    satisfied: list[torch.Tensor]
    next: list[torch.Tensor]


class ExplorerPolicy(EncoderStage, Navigator):
    """SKIP / EXPAND / ANSWER, next nodes and satisfied subgoals from a small trained model
    (module docstring). Weights load on first use; a LoRA checkpoint holds the adapter and the
    heads only (``memlab.stages.encoder``)."""

    def __init__(
        self,
        encoder: TextEncoder,
        hidden: PositiveInt = 128,
        next_threshold: UnitFloat = 0.5,
        satisfied_threshold: UnitFloat = 0.5,
        batch_size: PositiveInt = 64,
        cache_size: NonNegativeInt = 20000,
        device: str = "cpu",
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.hidden = hidden
        self.next_threshold = next_threshold
        self.satisfied_threshold = satisfied_threshold
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.device = device
        self.pair: nn.Module | None = None
        self.relevance: nn.Linear | None = None
        self.route: nn.Linear | None = None
        self.action: nn.Module | None = None
        # text -> unit vector, valid while the encoder's weights are those of ``_cache_stamp``.
        self._cache = VectorCache(cache_size)
        self._cache_stamp: tuple | None = None

    def _build_heads(self, hidden_size: int) -> None:
        self.pair = nn.Sequential(nn.Linear(2 * hidden_size + 1, self.hidden), nn.GELU())
        self.relevance = nn.Linear(self.hidden, 1)
        self.route = nn.Linear(self.hidden + RELATION_SLOTS, 1)
        self.action = nn.Sequential(nn.Linear(self.hidden + len(FEATURES), self.hidden), nn.GELU(),
                                    nn.Linear(self.hidden, len(ACTIONS)))

    # -- encoding --------------------------------------------------------------------------
    def embed(self, texts: list[str]) -> torch.Tensor:
        """Unit vectors ``[len(texts), hidden_size]``: differentiable while the encoder trains
        (train mode, gradients on), else from the cache, which a frozen encoder always uses."""
        self.warm_up()
        trains = self._encoder_trains()
        if self.cache_size == 0 or (trains and (torch.is_grad_enabled() or self.encoder.training)):
            return self._encode(list(texts))
        self._check_cache()
        vectors = self._cache.lookup(list(texts), self._encode, self.batch_size)
        return torch.stack(vectors) if vectors else self._encode([])

    def _encode(self, texts: list[str]) -> torch.Tensor:
        if not texts:
            return torch.zeros(0, self.encoder.hidden_size, device=self.device)
        frozen = not self._encoder_trains()
        was_training = self.encoder.training
        if frozen:  # a frozen encoder never drops out: its vectors are fixed, so cacheable
            self.encoder.eval()
        try:
            return F.normalize(self.encoder(texts), dim=-1)
        finally:
            self.encoder.train(was_training)

    def _encoder_trains(self) -> bool:
        return any(p.requires_grad for p in self.encoder.parameters())

    def _check_cache(self) -> None:
        # An optimiser step changes parameters in place (bumping their version); a move or a
        # load replaces them. Either way the cached vectors are stale.
        stamp = tuple((p.data_ptr(), p._version) for p in self.encoder.parameters())
        if stamp != self._cache_stamp:
            self._cache.clear()
            self._cache_stamp = stamp

    # -- scoring ---------------------------------------------------------------------------
    def _pairs(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        cosine = (a * b).sum(-1, keepdim=True)
        return self.pair(torch.cat([a * b, (a - b).abs(), cosine], dim=-1))

    def logits(self, items: list[NavigateIn]) -> ExplorerLogits:
        """The heads' logits for each state (``ExplorerLogits``); differentiable."""
        if not isinstance(items, list):
            raise TypeError(f"ExplorerPolicy.logits takes a list of NavigateIn, got {type(items).__name__}")
        self.warm_up()
        if not items:
            empty = torch.zeros(0, device=self.device)
            return ExplorerLogits(torch.zeros(0, len(ACTIONS), device=self.device), empty, [], [])
        texts: dict[str, int] = {}

        def index(text: str) -> int:
            return texts.setdefault(text, len(texts))

        plans = []
        for item in items:
            open_goals = [j for j, done in enumerate(item.satisfied) if not done]
            plans.append({
                "question": index(item.question),
                "subgoals": [index(s) for s in item.subgoals],
                "queries": list(dict.fromkeys([index(item.question)] + [index(item.subgoals[j]) for j in open_goals])),
                "open": open_goals,
                "node": index(view_text(item.node)),
                "neighbours": [index(view_text(n.view)) for n in item.neighbours],
                "relations": [relation_slot(n.relation) for n in item.neighbours],
                "kept": [index(view_text(v)) for v in item.kept],
            })
        vectors = self.embed(list(texts))
        device = vectors.device
        # Every pair of the batch in one pass through the pair projector.
        left: list[int] = []
        right: list[int] = []

        def pairs(queries: list[int], targets: list[int]) -> slice:
            start = len(left)
            for q in queries:
                for t in targets:
                    left.append(q)
                    right.append(t)
            return slice(start, len(left))

        for plan in plans:
            plan["qn"] = pairs([plan["question"]], [plan["node"]])
            plan["sn"] = pairs(plan["subgoals"], [plan["node"]])
            plan["qk"] = pairs([plan["question"]], plan["kept"])
            plan["route"] = pairs(plan["queries"], plan["neighbours"])
        a, b = vectors[torch.tensor(left, device=device)], vectors[torch.tensor(right, device=device)]
        z = self._pairs(a, b)
        cosine = (a * b).sum(-1)
        relevance = self.relevance(z).squeeze(-1)
        slots = torch.tensor([s for plan in plans for _ in plan["queries"] for s in plan["relations"]], device=device,
                             dtype=torch.long)
        route_rows = torch.cat([torch.arange(p["route"].start, p["route"].stop, device=device) for p in plans])
        routed = self.route(torch.cat([z[route_rows], F.one_hot(slots, RELATION_SLOTS).to(z.dtype)], -1)).squeeze(-1)
        route_of, at = [], 0
        for plan in plans:
            n = plan["route"].stop - plan["route"].start
            route_of.append(routed[at:at + n].view(len(plan["queries"]), len(plan["neighbours"])).amax(0)
                            if plan["neighbours"] else routed[:0])
            at += n
        features, satisfied = [], []
        for item, plan, nxt in zip(items, plans, route_of):
            sat = relevance[plan["sn"]]
            satisfied.append(sat)
            p_node = torch.sigmoid(relevance[plan["qn"]][0])
            p_sat = torch.sigmoid(sat)
            flags = torch.tensor(item.satisfied, dtype=z.dtype, device=device)
            kept_rel = torch.sigmoid(relevance[plan["qk"]])
            node_vector = vectors[plan["node"]]
            kept_sim = vectors[plan["kept"]] @ node_vector
            zero = p_node.new_zeros(())
            features.append(torch.stack([
                p_node,
                p_sat[plan["open"]].max() if plan["open"] else zero,
                flags.mean() if len(flags) else zero,
                torch.maximum(flags, p_sat).mean() if len(flags) else zero,
                p_node.new_tensor(math.log1p(len(item.kept))),
                kept_rel.max() if len(kept_rel) else zero,
                kept_sim.max() if len(kept_sim) else zero,
                p_node.new_tensor(math.log1p(len(item.neighbours))),
                torch.sigmoid(nxt).max() if len(nxt) else zero,
                cosine[plan["qn"]][0],
            ]))
        qn = torch.tensor([p["qn"].start for p in plans], device=device, dtype=torch.long)
        action = self.action(torch.cat([z[qn], torch.stack(features)], -1))
        return ExplorerLogits(action, relevance[qn], satisfied, route_of)

    def loss(self, logits: ExplorerLogits, targets: list[ExplorerTarget], items: list[NavigateIn],
             action_weights: torch.Tensor | None = None) -> torch.Tensor:
        """Action cross-entropy (``action_weights``: one per ``ACTIONS``, e.g. against the SKIP
        majority) + mean binary cross-entropies of node relevance (target: the action keeps the
        node), subgoal satisfaction and next nodes (``items`` name the neighbours)."""
        if not (len(targets) == len(items) == logits.action.shape[0]):
            raise ValueError(f"ExplorerPolicy.loss: {logits.action.shape[0]} logits, {len(targets)} targets, "
                             f"{len(items)} items")
        device = logits.action.device
        actions = torch.tensor([ACTIONS.index(t.action) for t in targets], device=device)
        weights = None if action_weights is None else action_weights.to(device, logits.action.dtype)
        total = F.cross_entropy(logits.action, actions, weight=weights)
        keeps = torch.tensor([t.action != "SKIP" for t in targets], device=device, dtype=logits.relevance.dtype)
        total = total + F.binary_cross_entropy_with_logits(logits.relevance, keeps)
        sat_targets = [torch.tensor([j in t.satisfied for j in range(len(s))], dtype=s.dtype, device=device)
                       for t, s in zip(targets, logits.satisfied)]
        next_targets = [torch.tensor([n.view.key in t.next_nodes for n in item.neighbours], dtype=s.dtype, device=device)
                        for t, item, s in zip(targets, items, logits.next)]
        for outputs, wanted in ((logits.satisfied, sat_targets), (logits.next, next_targets)):
            if sum(len(o) for o in outputs):
                total = total + F.binary_cross_entropy_with_logits(torch.cat(outputs), torch.cat(wanted))
        return total

    # -- inference -------------------------------------------------------------------------
    def forward(self, batch: list[NavigateIn]) -> list[NavigateOut]:
        out = []
        self.warm_up()
        # ``inference()`` switches every submodule to eval and back (milliseconds under LoRA):
        # only worth it when the policy is in train mode.
        with self.inference() if self.training else torch.inference_mode():
            for start in range(0, len(batch), self.batch_size):
                chunk = batch[start:start + self.batch_size]
                logits = self.logits(chunk)
                for row, item in enumerate(chunk):
                    out.append(self.decide(item, logits.action[row], logits.relevance[row], logits.satisfied[row],
                                           logits.next[row]))
        return out

    def decide(self, item: NavigateIn, action: torch.Tensor, relevance: torch.Tensor, satisfied: torch.Tensor,
               nxt: torch.Tensor) -> NavigateOut:
        """One state's decision from its logits (module docstring)."""
        choice = ACTIONS[int(action.argmax())]
        p_next = torch.sigmoid(nxt).tolist()
        ranked = sorted((k for k, p in enumerate(p_next) if p > self.next_threshold), key=lambda k: -p_next[k])
        nodes = [item.neighbours[k].view.key for k in ranked]
        p_sat = torch.sigmoid(satisfied).tolist()
        goals = [j for j, p in enumerate(p_sat) if not item.satisfied[j] and p > self.satisfied_threshold]
        reasoning = f"p(relevant)={torch.sigmoid(relevance).item():.2f}"
        return checked_decision(choice, nodes, goals, item, reasoning)
