"""The trained event segmenter (``BoundarySegmenter``) and its fixed-span baseline: the prompted
segmenter's unit convention, decoding, training steps, checkpoints, and a config swap into
CompassMem that builds with no LLM call."""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import datetime
from pathlib import Path

import pytest
import torch

from memlab.stage import Stage
from memlab.stages.encoder import TextEncoder
from memlab.stages.segment import BoundarySegmenter, FixedSpanSegmenter, PromptedEventSegmenter, SegmentIn
from memlab.stages.segment.neural import decode_boundaries
from memlab.training.segmentation import BoundaryLabels, boundary_label_loss
from memlab.types import Session, Turn
from tests.fakes import ReplayLM
from tests.pipelines.test_compassmem import Script, _with_lm, minilm  # noqa: F401  (minilm: a fixture)

REPO = Path(__file__).resolve().parents[2]
TEXTS = [("Ann", "I adopted a puppy named Rex from the shelter."), ("Bob", "That is great news!"),
         ("Ann", "Rex chews every shoe in the house."), ("Bob", "Have you started the pottery class?"),
         ("Ann", "Yes, my first bowl cracked in the kiln."), ("Bob", "We fly to Lisbon in June."),
         ("Cy", "Lisbon is lovely in June.")]


def session(n: int = 7, sid: str = "session_1") -> Session:
    turns = tuple(Turn(f"D1:{t + 1}", *TEXTS[t % len(TEXTS)], image_caption="a dog" if t == 2 else None)
                  for t in range(n))
    return Session(sid, datetime(2023, 5, 7, 13, 30), turns)


def small_segmenter(**kwargs) -> BoundarySegmenter:
    torch.manual_seed(0)
    encoder = TextEncoder(max_length=32, frozen=kwargs.pop("frozen", True), lora_rank=kwargs.pop("lora_rank", 0))
    return BoundarySegmenter(encoder, **{"context_size": 16, **kwargs})


def set_bias(segmenter: BoundarySegmenter, value: float) -> None:
    """Make every boundary logit about ``value`` (the head's last bias dominates)."""
    segmenter.warm_up()
    with torch.no_grad():
        segmenter.head[-1].weight.zero_()
        segmenter.head[-1].bias.fill_(value)


def flat(rows: list[list[float]]) -> list[float]:
    return [p for row in rows for p in row]


def unit_fields(units) -> list[dict]:
    """Every field of the units but how their turns were found (a trained span is stated by the
    segmenter, a failed prompted call's turns are filled in)."""
    return [{**asdict(u), "attributes": {k: v for k, v in u.attributes.items() if k != "provenance"}} for u in units]


def test_units_follow_the_prompted_segmenters_convention():
    """Spans of 3 turns, as the prompted segmenter's extractive events of a failed call (same
    helpers): identical units, field by field (attributes included), from all three segmenters."""
    item = SegmentIn("conv-x", session())
    prompted = PromptedEventSegmenter(lm=ReplayLM(lambda request: "not json"), max_turns_per_call=None,
                                      uncovered_span=3)
    [expected] = prompted([item])
    assert expected.error and len(expected.units) == 3  # the call failed twice: extractive events
    [fixed] = FixedSpanSegmenter(span=3)([item])
    [trained] = small_segmenter(threshold=1.0, max_span=3)([item])  # never above 1.0: only forced boundaries
    assert unit_fields(fixed.units) == unit_fields(trained.units) == unit_fields(expected.units)
    first, last = trained.units[0], trained.units[-1]
    assert first.id == "conv-x/session_1/w0/event0" and first.kind == "event"
    assert first.source_ids == ("D1:1", "D1:2", "D1:3") and first.timestamp == item.session.timestamp
    assert first.text == "Ann: I adopted a puppy named Rex from the shelter. Bob: That is great news! " \
                         "Ann: Rex chews every shoe in the house. [shares an image: a dog]"
    assert first.attributes == {"session": "session_1", "participants": ["Ann", "Bob"], "extractive": True,
                                "provenance": "stated"}
    assert {u.attributes["provenance"] for u in expected.units} == {"filled"}
    assert last.source_ids == ("D1:7",) and last.attributes["participants"] == ["Cy"]
    assert FixedSpanSegmenter()([SegmentIn("c", Session("s", None, ()))])[0].units == ()


def test_participants_are_capped_at_max_people():
    turns = tuple(Turn(f"D1:{i}", name, "hello there") for i, name in enumerate("ABCDE", start=1))
    [out] = FixedSpanSegmenter(span=5, max_people=3)([SegmentIn("c", Session("s", None, turns))])
    assert out.units[0].attributes["participants"] == ["A", "B", "C"]


def test_decoding_thresholds_and_forces_a_boundary_at_max_span():
    assert decode_boundaries([0.9, 0.1, 0.6, 0.2], 0.5, None) == [1, 3]
    assert decode_boundaries([0.1] * 6, 0.5, None) == []
    assert decode_boundaries([0.1] * 6, 0.5, 2) == [2, 4, 6]  # 7 turns: spans of 2, 2, 2, 1
    # a predicted boundary restarts the count
    assert decode_boundaries([0.1, 0.9, 0.1, 0.1, 0.1, 0.1], 0.5, 3) == [2, 5]
    assert decode_boundaries([0.5, 0.51], 0.5, None) == [2]  # strictly above the threshold
    assert decode_boundaries([], 0.5, 1) == []
    segmenter = small_segmenter(max_span=4)
    set_bias(segmenter, 50.0)
    assert segmenter.predict_boundaries([session(5), session(1)]) == [[1, 2, 3, 4], []]
    set_bias(segmenter, -50.0)
    assert segmenter.predict_boundaries([session(7)]) == [[4]]
    spans = [u.source_ids for u in segmenter([SegmentIn("c", session(7))])[0].units]
    assert spans == [("D1:1", "D1:2", "D1:3", "D1:4"), ("D1:5", "D1:6", "D1:7")]


def test_logits_shapes_loss_checks_and_bad_settings():
    segmenter = small_segmenter()
    logits = segmenter.boundary_logits([session(7), session(1), session(3)])
    assert [tuple(l.shape) for l in logits] == [(6,), (0,), (2,)]
    assert logits[0].requires_grad
    every = [BoundaryLabels.exact([2, 5], range(1, 7)), BoundaryLabels(), BoundaryLabels.exact([1], [1, 2])]
    plain, weighted = boundary_label_loss(logits, every), boundary_label_loss(logits, every, pos_weight=3.0)
    assert plain.item() > 0 and weighted.item() > plain.item()
    # exact labels are the binary cross-entropy over their positions
    flat = torch.cat([logits[0], logits[2]])
    gold = torch.tensor([0, 1, 0, 0, 1, 0, 1, 0.])
    assert plain.item() == pytest.approx(torch.nn.functional.binary_cross_entropy_with_logits(flat, gold).item())
    with pytest.raises(ValueError, match="outside 1 .. 2"):
        boundary_label_loss(logits, [every[0], every[1], BoundaryLabels.exact([3], [3])])
    assert boundary_label_loss([logits[1]], [BoundaryLabels()]).item() == 0.0
    # unknown positions do not count: a label only at positions 1, 2 and 5 ignores the rest
    partial = [BoundaryLabels.exact([2, 5], [1, 2, 5]), BoundaryLabels(), BoundaryLabels()]
    assert boundary_label_loss(logits, partial).item() != pytest.approx(plain.item())
    with pytest.raises(TypeError, match="list of sessions"):
        segmenter.boundary_logits(session())
    with pytest.raises(ValueError, match="frozen"):
        TextEncoder(frozen=True, lora_rank=4)
    with pytest.raises(ValueError, match="increasing turn indices"):
        from memlab.stages.segment.neural import span_events

        span_events(SegmentIn("c", session(3)), [2, 1], 3)


def test_a_few_gradient_steps_lower_the_loss_on_a_synthetic_session():
    segmenter = small_segmenter(dropout=0.0)
    sessions = [session(7), session(5, "session_2")]
    targets = [BoundaryLabels.exact([3, 5], range(1, 7)), BoundaryLabels.exact([2], range(1, 5))]
    optimiser = torch.optim.AdamW([p for p in segmenter.parameters() if p.requires_grad], lr=1e-2)
    assert not any(p.requires_grad for p in segmenter.encoder.parameters())  # frozen by default
    with torch.no_grad():
        vectors = segmenter.encode_sessions(sessions)  # a frozen encoder's vectors serve every step
    losses = []
    for _ in range(8):
        loss = boundary_label_loss(segmenter.logits_from_vectors(vectors), targets)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    # the same logits from the sessions themselves, and the precomputed vectors serve prediction too
    segmenter.eval()
    with torch.no_grad():
        direct = segmenter.boundary_logits(sessions)
        cached = segmenter.logits_from_vectors(vectors)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(direct, cached))
    assert segmenter.predict_boundaries(sessions, vectors) == segmenter.predict_boundaries(sessions)


def test_save_load_round_trip_keeps_the_boundaries_and_only_the_trained_weights(tmp_path):
    segmenter = small_segmenter(threshold=0.45, max_span=6)
    segmenter.warm_up()
    with torch.no_grad():
        for p in segmenter.head.parameters():
            p.add_(torch.randn_like(p))
    assert segmenter.checkpoint_state() and not any(k.startswith("encoder.") for k in segmenter.checkpoint_state())
    segmenter.save(tmp_path / "seg")
    loaded = Stage.load(tmp_path / "seg")
    assert isinstance(loaded, BoundarySegmenter) and loaded.threshold == 0.45 and loaded.max_span == 6
    sessions = [session(7), session(4, "session_2")]
    assert flat(loaded.boundary_probabilities(sessions)) == pytest.approx(flat(segmenter.boundary_probabilities(sessions)))
    items = [SegmentIn("c", s) for s in sessions]
    assert unit_fields(u for out in loaded(items) for u in out.units) == \
        unit_fields(u for out in segmenter(items) for u in out.units)
    # under LoRA the adapter is saved too, never the packaged base
    lora = small_segmenter(frozen=False, lora_rank=2)
    keys = set(lora.checkpoint_state())
    assert any("lora_" in k for k in keys) and all(not k.startswith("encoder.") or "lora_" in k for k in keys)
    lora.save(tmp_path / "lora")
    assert flat(Stage.load(tmp_path / "lora").boundary_probabilities(sessions)) == \
        pytest.approx(flat(lora.boundary_probabilities(sessions)))


def test_a_checkpoint_swapped_into_compassmem_by_config_builds_with_no_llm_call(tmp_path, minilm):
    from memlab.config import build_pipeline
    from memlab.data import load_sample

    segmenter = small_segmenter(max_span=4)
    set_bias(segmenter, -50.0)  # events of 4 turns
    checkpoint = segmenter.save(tmp_path / "segmenter")
    overrides = ["segmenter._component_=memlab.stage.load_stage", f"segmenter.path={checkpoint}",
                 "construction.edges=false", "relation_extractor=null", "fuser=null"]  # the other construction LLM stages off
    script = Script(action="EXPAND", satisfy="[1]")
    cm = _with_lm(build_pipeline(REPO / "configs" / "pipelines" / "compassmem.yaml", overrides)[0], ReplayLM(script))
    cm.embedder = minilm
    assert isinstance(cm.segmenter, BoundarySegmenter) and cm.segmenter.loaded_from == checkpoint.absolute()
    full = load_sample()[0]
    sample = replace(full, sessions=full.sessions[:2])
    memory = cm.build(sample.history())
    assert script.kinds == []  # construction asked no LLM anything
    units = [memory.unit(e) for e in memory.events()]
    assert units and all(u.kind == "event" and u.attributes["extractive"] for u in units)
    assert {t for u in units for t in u.source_ids} == {t.id for _, t in sample.turns()}  # every turn kept
    assert all(len(u.source_ids) <= 4 for u in units) and len(units) >= len(list(sample.turns())) / 4
    answer = cm.answer(memory, sample.questions[0].as_query())
    assert isinstance(answer.text, str) and answer.retrieved and "plan" in script.kinds
