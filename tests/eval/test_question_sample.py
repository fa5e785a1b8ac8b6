"""``--sample-questions``: a seeded sample whose category mix is the full set's."""

from __future__ import annotations

from collections import Counter

import pytest

from memlab.eval.conversation import RunOptions, select_questions, stratified_sample
from memlab.types import Conversation, Question


def _questions(counts: dict[str, int]) -> list[Question]:
    found = []
    for category, n in counts.items():
        found += [Question(id=f"{category}-{i}", conversation_id="c", text="?", answer="a", category=category)
                  for i in range(n)]
    # interleaved as a conversation asks them, not grouped by category
    return sorted(found, key=lambda q: (int(q.id.rsplit("-", 1)[1]), q.category))


def test_each_category_keeps_its_share_and_the_conversation_order():
    questions = _questions({"multi-hop": 32, "temporal": 37, "open-domain": 13, "single-hop": 70})
    sample = stratified_sample(questions, 100, "0:conv-26")
    assert len(sample) == 100
    # shares of 100 over 152: 21.05, 24.34, 8.55, 46.05 -> the largest remainder (0.55) takes the spare one
    assert Counter(q.category for q in sample) == {"multi-hop": 21, "temporal": 24, "open-domain": 9, "single-hop": 46}
    order = [q.id for q in questions]
    assert [q.id for q in sample] == sorted((q.id for q in sample), key=order.index)


def test_the_draw_is_fixed_by_the_seed_and_moves_with_it():
    questions = _questions({"multi-hop": 30, "single-hop": 30})
    first = [q.id for q in stratified_sample(questions, 20, "0:c")]
    assert first == [q.id for q in stratified_sample(list(questions), 20, "0:c")]
    assert first != [q.id for q in stratified_sample(questions, 20, "1:c")]
    assert stratified_sample(questions, 60, "0:c") == questions  # asking for all (or more) keeps all


def test_the_sample_is_drawn_after_the_category_filter_and_excludes_max_questions():
    questions = _questions({"multi-hop": 10, "adversarial": 10})
    conversation = Conversation(id="c", speakers=("A", "B"), sessions=(), questions=tuple(questions))
    chosen = select_questions(conversation, RunOptions(categories=("multi-hop",), sample_questions=4, sample_seed=3))
    assert len(chosen) == 4 and {q.category for q in chosen} == {"multi-hop"}
    with pytest.raises(ValueError, match="give one"):
        RunOptions(max_questions=5, sample_questions=5)
    with pytest.raises(ValueError, match="sample_questions must be >= 1"):
        RunOptions(sample_questions=0)
