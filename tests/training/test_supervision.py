"""Supervision data sets: by-conversation splits, labels checked by hand against the sample."""

from __future__ import annotations

import dataclasses

import pytest

from memlab.data import load_sample
from memlab.lm.cache import ResponseCache
from memlab.lm.types import ChatRequest, Completion
from memlab.memory.store import UnitMemory
from memlab.pipelines.rag import RAG
from memlab.stages.answer import PromptedAnswerer
from memlab.stages.segment import SegmentIn, TurnSegmenter
from memlab.training.distill import conversation_texts, distillation_dropped, distillation_examples
from memlab.training.rerank import rerank_examples
from memlab.training.route import routing_examples
from memlab.training.supervision import (
    FIXED_EVAL_IDS,
    Split,
    evaluable_questions,
    fixed_split,
    leave_one_out,
    split_conversations,
)
from memlab.training.traversal import traversal_targets
from memlab.types import MemoryUnit, Question
from tests.fakes import ReplayLM
from tests.memory.helpers import HashingEmbedder

DEV_IDS = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47")


@pytest.fixture(scope="module")
def sample():
    return load_sample()[0]


def rag_turns(retrieval="hybrid"):
    """The rag_turns first stage (turn units, rrf_k=10) over the hashing embedder."""
    return RAG(segmenter=TurnSegmenter(), embedder=HashingEmbedder(), retrieval=retrieval, rrf_k=10,
               answerer=PromptedAnswerer(lm=ReplayLM(lambda r: "unused")))


def turn_units(conversation):
    outputs = TurnSegmenter()([SegmentIn(conversation.id, session) for session in conversation.sessions])
    return [unit for out in outputs for unit in out.units]


class UnitsFirstStage:
    """A first stage over the units ``units(conversation)`` makes (hybrid, rrf_k=10)."""

    retrieval, rrf_k = "hybrid", 10

    def __init__(self, units, conversation):
        self.units, self.conversation = units, conversation

    def build(self, history):
        return UnitMemory.build(self.units(self.conversation), HashingEmbedder())


@pytest.fixture(scope="module")
def rerank_data(sample):
    return rerank_examples([sample], rag_turns())


def renamed(conversation, new_id):
    """The conversation under another id (its questions follow), to make multi-conversation data."""
    questions = tuple(
        dataclasses.replace(q, id=q.id.replace(conversation.id, new_id), conversation_id=new_id)
        for q in conversation.questions
    )
    return dataclasses.replace(conversation, id=new_id, questions=questions)


# -- splits -------------------------------------------------------------------------------
def test_fixed_split_holds_out_the_fixed_conversations():
    split = fixed_split(DEV_IDS)
    assert split.eval_ids == FIXED_EVAL_IDS
    assert set(split.train_ids) == set(DEV_IDS) - set(FIXED_EVAL_IDS)
    assert not set(split.train_ids) & set(split.eval_ids)


def test_leave_one_out_holds_out_each_conversation_once():
    splits = leave_one_out(DEV_IDS)
    assert [s.eval_ids for s in splits] == [(i,) for i in DEV_IDS]
    for split in splits:
        assert not set(split.train_ids) & set(split.eval_ids)
        assert set(split.train_ids) | set(split.eval_ids) == set(DEV_IDS)


def test_bad_splits_raise_clear_errors():
    with pytest.raises(ValueError, match="conv-99"):
        fixed_split(DEV_IDS, eval_ids=("conv-99",))
    with pytest.raises(ValueError, match="no training conversation"):
        fixed_split(("conv-26", "conv-30"))
    with pytest.raises(ValueError, match="at least 2"):
        leave_one_out(("conv-26",))
    with pytest.raises(ValueError, match="both train and eval"):
        Split("leaky", ("a", "b"), ("b",))


def test_split_conversations_never_leaks_into_the_data(sample):
    conversations = [renamed(sample, i) for i in ("c1", "c2", "c3")]
    for split in [fixed_split(["c1", "c2", "c3"], eval_ids=("c3",)), *leave_one_out(["c1", "c2", "c3"])]:
        train, held_out = split_conversations(conversations, split)
        assert [c.id for c in train] == list(split.train_ids)
        assert [c.id for c in held_out] == list(split.eval_ids)
        routing = routing_examples(train)
        assert set(routing["conversation_id"]) == set(split.train_ids)
        assert not set(routing["question_id"]) & {q.id for c in held_out for q in c.questions}
    with pytest.raises(ValueError, match="not in the data"):
        split_conversations(conversations, fixed_split(["c1", "c4"], eval_ids=("c4",)))


# -- reranking ----------------------------------------------------------------------------
def plain(row):
    """A row's unit id under its conversation's own id (a pipeline builds under an opaque one)."""
    _, slash, rest = row["unit_id"].partition("/")
    return f"{row['conversation_id']}/{rest}" if slash else row["unit_id"]


def positives_of(data, question_id):
    return {plain(r) for r in data if r["question_id"] == question_id and r["label"] == 1}


def test_positives_are_exactly_the_evidence_turns(rerank_data):
    # Hand-checked in the sample: D2:12 / D4:2 are Priya's Lisbon turns, D1:7 / D3:1 / D3:3 her pets.
    assert positives_of(rerank_data, "sample-1:q3") == {"sample-1/D2:12", "sample-1/D4:2"}
    assert positives_of(rerank_data, "sample-1:q12") == {"sample-1/D1:7", "sample-1/D3:1", "sample-1/D3:3"}
    lisbon = [r["text"] for r in rerank_data if r["question_id"] == "sample-1:q3" and r["label"] == 1]
    assert all("Lisbon" in text for text in lisbon)


def test_positive_text_is_what_the_turn_segmenter_gives(sample, rerank_data):
    units = {u.id: u.text for u in turn_units(sample)}
    for row in rerank_data:
        assert row["text"] == units[plain(row)]
    assert units["sample-1/D1:7"].startswith("[") and "Priya: My ginger menace" in units["sample-1/D1:7"]


def test_negatives_never_contain_a_positive_and_come_from_both_retrievers(sample, rerank_data):
    evidence = {q.id: set(q.evidence) for q in sample.questions}
    units = {u.id: u for u in turn_units(sample)}
    question_ids = set(rerank_data["question_id"])
    assert len(question_ids) == 19  # the 4 adversarial questions are left out by default
    for qid in question_ids:
        rows = [r for r in rerank_data if r["question_id"] == qid]
        negatives = [r for r in rows if r["label"] == 0]
        assert len(negatives) == 8
        assert len({r["unit_id"] for r in negatives}) == 8
        assert {r["source"] for r in negatives} == {"bm25", "dense"}
        for r in negatives:
            assert not set(units[plain(r)].source_ids) & evidence[qid]
            assert plain(r) not in positives_of(rerank_data, qid)


def test_rerank_examples_are_deterministic_and_honour_arguments(sample, rerank_data):
    again = rerank_examples([sample], rag_turns())
    assert again.to_list() == rerank_data.to_list()
    odd = rerank_examples([sample], rag_turns(), negatives=3, categories=("temporal",), seed=1)
    assert set(odd["question_id"]) == {q.id for q in sample.questions if q.category == "temporal"}
    for qid in set(odd["question_id"]):
        assert sum(1 for r in odd if r["question_id"] == qid and r["label"] == 0) == 3
    assert "Questions used: 7" in odd.info.description


def test_uniform_sampling_reaches_beyond_the_hardest_negatives(sample, rerank_data):
    uniform = rerank_examples([sample], rag_turns(), sampling="uniform", candidates=30)
    assert uniform.filter(lambda r: r["label"] == 1)["unit_id"] == rerank_data.filter(lambda r: r["label"] == 1)["unit_id"]
    top_ranks = [r["rank"] for r in rerank_data if r["label"] == 0]
    uniform_ranks = [r["rank"] for r in uniform if r["label"] == 0]
    assert max(uniform_ranks) < 30 and sum(uniform_ranks) > sum(top_ranks)
    assert uniform["unit_id"] == rerank_examples([sample], rag_turns(), sampling="uniform", candidates=30)["unit_id"]
    with pytest.raises(ValueError, match="sampling"):
        rerank_examples([sample], rag_turns(), sampling="hard")


def test_dense_first_stage_draws_every_negative_from_the_dense_ranking(sample, rerank_data):
    dense = rerank_examples([sample], rag_turns("dense"))
    negatives = [r for r in dense if r["label"] == 0]
    assert negatives and {r["source"] for r in negatives} == {"dense"}
    for qid in set(dense["question_id"]):
        assert sum(1 for r in negatives if r["question_id"] == qid) == 8
    assert dense.filter(lambda r: r["label"] == 1)["unit_id"] == rerank_data.filter(lambda r: r["label"] == 1)["unit_id"]
    assert "First stage: dense" in dense.info.description
    with pytest.raises(ValueError, match="retrieval"):
        rerank_examples([sample], rag_turns("bm25"))


def test_rerank_examples_over_custom_units(sample):
    def pairs(conversation):
        turns = [t for _, t in conversation.turns()]
        return [
            MemoryUnit(id=f"pair{i}", text=" ".join(t.render() for t in turns[i:i + 2]),
                       source_ids=tuple(t.id for t in turns[i:i + 2]), kind="chunk")
            for i in range(0, len(turns), 2)
        ]

    data = rerank_examples([sample], UnitsFirstStage(pairs, sample), negatives=4)
    chunks = {u.id: u for u in pairs(sample)}
    expected = {u.id for u in chunks.values() if {"D2:12", "D4:2"} & set(u.source_ids)}
    assert positives_of(data, "sample-1:q3") == expected
    assert "UnitsFirstStage" in data.info.description  # the card names the first stage


def test_questions_without_a_positive_unit_are_skipped_and_counted(sample):
    def first_session_only(conversation):
        return [u for u in turn_units(conversation) if u.source_ids[0].startswith("D1:")]

    data = rerank_examples([sample], UnitsFirstStage(first_session_only, sample))
    assert "sample-1:q1" not in set(data["question_id"])  # evidence D2:9 is not among the units
    assert "sample-1:q0" in set(data["question_id"])
    skipped = sum(1 for q in sample.questions if q.category != "adversarial" and not any(e.startswith("D1:") for e in q.evidence))
    assert f"skipped with no positive unit: {skipped}" in data.info.description


# -- routing ------------------------------------------------------------------------------
def test_routing_labels_follow_the_documented_mapping(sample):
    extra = Question(id="x:why", conversation_id=sample.id, text="Why did Priya adopt a kitten?", answer="",
                     category="single-hop")
    conversation = dataclasses.replace(sample, questions=(*sample.questions, extra))
    rows = {r["question_id"]: r for r in routing_examples([conversation])}
    assert len(rows) == 24
    assert (rows["sample-1:q5"]["question_type"], rows["sample-1:q5"]["intent"], rows["sample-1:q5"]["complexity"]) \
        == ("temporal", "WHEN", "LOW")
    assert (rows["sample-1:q12"]["intent"], rows["sample-1:q12"]["complexity"]) == ("ENTITY", "HIGH")
    assert (rows["sample-1:q16"]["question_type"], rows["sample-1:q16"]["complexity"]) == ("open-domain", "HIGH")
    assert (rows["sample-1:q0"]["intent"], rows["sample-1:q0"]["complexity"]) == ("ENTITY", "LOW")
    assert (rows["x:why"]["intent"], rows["x:why"]["complexity"]) == ("WHY", "LOW")
    assert rows["sample-1:q19"]["question_type"] == "adversarial"
    assert "DERIVED" in routing_examples([sample]).info.description


def test_routing_refuses_non_locomo_categories(sample):
    odd = Question(id="x", conversation_id=sample.id, text="?", answer="", category="knowledge-update")
    with pytest.raises(ValueError, match="knowledge-update"):
        routing_examples([dataclasses.replace(sample, questions=(odd,))])


# -- traversal ----------------------------------------------------------------------------
def test_traversal_targets_are_the_units_holding_evidence(sample):
    units = turn_units(sample)
    no_evidence = Question(id="x", conversation_id=sample.id, text="?", answer="", category="single-hop")
    targets = {t["question_id"]: t for t in traversal_targets([*sample.questions, no_evidence], units)}
    assert "x" not in targets
    assert targets["sample-1:q3"]["targets"] == ["sample-1/D2:12", "sample-1/D4:2"]
    assert targets["sample-1:q3"]["conversation_id"] == sample.id
    with pytest.raises(ValueError, match="one conversation"):
        traversal_targets([*sample.questions, dataclasses.replace(no_evidence, conversation_id="other")], units)


def test_evaluable_questions_are_answerable_with_evidence(sample):
    no_evidence = dataclasses.replace(sample.questions[0], id="x", evidence=())
    conversation = dataclasses.replace(sample, questions=(*sample.questions, no_evidence))
    kept = evaluable_questions(conversation)
    assert "x" not in {q.id for q in kept}
    assert {q.category for q in kept} == {"multi-hop", "temporal", "open-domain", "single-hop"}
    assert [q.id for q in evaluable_questions(conversation, ["temporal"])] == [
        q.id for q in sample.questions if q.category == "temporal" and q.evidence]


# -- distillation -------------------------------------------------------------------------
def test_distillation_keeps_complete_matching_completions(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    try:
        def put(prompt, text, finish="stop", model="teacher", schema=None):
            cache.put(model, ChatRequest.of(prompt, json_schema=schema),
                      Completion(text=text, prompt_tokens=3, completion_tokens=2, latency_s=0.1, finish_reason=finish))

        put("Extract events from: A", '{"events": []}', schema={"type": "object"})
        put("Extract events from: B", '{"events": [', finish="length")
        put("Extract events from: C", "  ")
        put("Answer the question: D", "Paris")
        put("Extract events from: E", '{"events": ["x"]}', model="other")

        data = distillation_examples(cache, model="teacher", match=r"^Extract events")
        assert data.num_rows == 1
        row = data[0]
        assert row["messages"] == [{"role": "user", "content": "Extract events from: A"}]
        assert row["completion"] == '{"events": []}'
        assert row["json_schema"] == '{"type": "object"}'
        assert "1 cut off by the token limit, 1 empty" in data.info.description
        assert distillation_dropped(data) == {"not_matching": 1, "held_out": 0, "truncated": 1, "empty": 1}

        everything = distillation_examples(cache)
        assert sorted(everything["completion"]) == sorted(['{"events": []}', "Paris", '{"events": ["x"]}'])
        assert set(everything["json_schema"]) == {'{"type": "object"}', ""}
        with pytest.raises(ValueError, match="bad match pattern"):
            distillation_examples(cache, match="(")
    finally:
        cache.close()


def test_distillation_leaves_out_calls_quoting_an_excluded_conversation(sample, tmp_path):
    turn = next(t for _, t in sample.turns() if len(t.text) > 40)
    texts = conversation_texts([sample])
    assert turn.text in texts and sample.questions[0].text in texts
    assert conversation_texts([sample], min_chars=1000) == [q.text for q in sample.questions]  # short turns left out
    cache = ResponseCache(tmp_path / "cache.sqlite")
    try:
        def put(prompt):
            cache.put("teacher", ChatRequest.of([{"role": "system", "content": "Extract events."},
                                                 {"role": "user", "content": prompt}]),
                      Completion(text="{}", prompt_tokens=3, completion_tokens=2, latency_s=0.1))

        put("Dialogue:\n" + "Tomas:   " + "\n ".join(turn.text.split(" ")))  # same text, other whitespace
        put("Question: " + sample.questions[0].text)
        put("Dialogue:\nAnn: I went hiking in the hills with my brother last weekend.")

        data = distillation_examples(cache, exclude=texts)
        assert data["messages"] == [[{"role": "system", "content": "Extract events."},
                                     {"role": "user", "content": "Dialogue:\nAnn: I went hiking in the hills with "
                                                                 "my brother last weekend."}]]
        assert distillation_dropped(data)["held_out"] == 2
        assert distillation_examples(cache).num_rows == 3
    finally:
        cache.close()
