"""select_conversations: the given ids in the data's order; an unknown id is refused, never dropped."""

from __future__ import annotations

import dataclasses

import pytest

from memlab.data import DataError, load_sample, select_conversations


@pytest.fixture(scope="module")
def three():
    sample = load_sample()[0]
    return [dataclasses.replace(sample, id=i) for i in ("a", "b", "c")]


def test_keeps_the_given_ids_in_the_data_order(three):
    assert [c.id for c in select_conversations(three, ["c", "a"])] == ["a", "c"]


def test_no_ids_keeps_everything(three):
    assert [c.id for c in select_conversations(three, None)] == ["a", "b", "c"]
    assert [c.id for c in select_conversations(three, ())] == ["a", "b", "c"]


def test_an_unknown_id_names_it_the_source_and_the_known_ones(three):
    with pytest.raises(DataError, match=r"^dev\.json: conversations \['x', 'y'\] are not in it "
                                        r"\(available: \['a', 'b', 'c'\]\)$"):
        select_conversations(three, ["a", "y", "x"], source="dev.json")
