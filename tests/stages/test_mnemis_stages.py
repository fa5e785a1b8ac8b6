"""Mnemis's prompted stages (entity, describe, fact, contradict, categorize, global select):
rendering and parsing with a scripted LM; what a real model does is tested end to end."""

from __future__ import annotations

import json
from datetime import date, datetime

from memlab.stages.categorize import CategorizeIn, NodeCard, PromptedCategorizer
from memlab.stages.contradict import Closing, ContradictIn, PromptedContradictionDetector
from memlab.stages.describe import DescribeIn, PromptedEntityDescriber, clip_tags
from memlab.stages.entity import EntityIn, PromptedEntityExtractor
from memlab.stages.fact import Fact, FactIn, PromptedFactExtractor
from memlab.stages.global_select import GlobalSelectIn, HierarchyNode, PromptedGlobalSelector
from memlab.stages.temporal import RuleTemporalNormalizer
from tests.fakes import ReplayLM

EPISODE = "Ann: I adopted Rex from the Lakeside shelter.\nBob: Rex is a lucky dog!"


def test_entities_are_grounded_distinct_and_reflection_returns_only_new_names():
    lm = ReplayLM([json.dumps({"entities": ["Ann", "ann", "Rex", "Godzilla"]}),
                   json.dumps({"entities": ["Rex", "Lakeside shelter", "Bob"]})])
    stage = PromptedEntityExtractor(lm=lm)
    first = stage([EntityIn(EPISODE, ("Bob: hi",))])[0]
    assert first.names == ("Ann", "Rex") and first.error is None  # "Godzilla" is named nowhere
    again = stage([EntityIn(EPISODE, (), first.names)])[0]
    assert again.names == ("Lakeside shelter", "Bob")
    assert "ALREADY EXTRACTED" in lm.requests[1].messages[0]["content"]
    assert lm.requests[0].json_schema["properties"]["entities"]["maxItems"] == 12


def test_entity_failure_is_counted_and_yields_nothing():
    stage = PromptedEntityExtractor(lm=ReplayLM(["no json", "still none"]))
    out = stage([EntityIn(EPISODE)])[0]
    assert out.names == () and out.error and len(stage.failures) == 1


def test_describe_matches_names_clips_tags_and_keeps_what_is_left_out():
    reply = {"entities": [{"name": "rex", "summary": "Ann's new dog from the shelter.",
                           "tags": ["Dog", "Pet adopted from shelter", "Dog", "a", "b", "c", "d"]}]}
    stage = PromptedEntityDescriber(lm=ReplayLM([json.dumps(reply)]))
    out = stage([DescribeIn(EPISODE, ("Ann", "Rex"), ("Ann likes dogs.", ""))])[0]
    ann, rex = out.descriptions
    assert (ann.name, ann.summary, ann.tags) == ("Ann", "Ann likes dogs.", ())
    assert rex.name == "Rex" and rex.summary == "Ann's new dog from the shelter."
    assert rex.tags == ("Dog", "Pet adopted from", "a", "b", "c")  # at most 5, each at most 3 words
    assert clip_tags(["one two three four"]) == ("one two three",)
    assert stage([DescribeIn(EPISODE, ())])[0].descriptions == ()  # nothing to describe: no call


def test_facts_link_given_entities_and_get_their_dates_resolved_in_code():
    reply = {"facts": [{"source": "ann", "target": "Rex", "fact": "Ann adopted Rex last week."},
                       {"source": "Ann", "target": "Zeus", "fact": "Ann met Zeus."},
                       {"source": "Ann", "target": "Ann", "fact": "Ann likes dogs."}]}
    stage = PromptedFactExtractor(lm=ReplayLM([json.dumps(reply)]), normalizer=RuleTemporalNormalizer())
    out = stage([FactIn(EPISODE, ("Ann", "Rex"), reference=datetime(2023, 5, 8))])[0]
    assert [(f.source, f.target) for f in out.facts] == [("Ann", "Rex"), ("Ann", "Ann")]
    adopted, likes = out.facts
    assert "last week (" in adopted.text and adopted.valid_at == date(2023, 5, 1)  # 8 May 2023 is a Monday
    assert likes.valid_at is None  # no time expression: the pipeline uses the episode's date


def test_fact_reflection_drops_facts_already_found():
    reply = {"facts": [{"source": "Ann", "target": "Rex", "fact": "Ann adopted Rex."},
                       {"source": "Bob", "target": "Rex", "fact": "Bob thinks Rex is lucky."}]}
    lm = ReplayLM([json.dumps(reply)])
    out = PromptedFactExtractor(lm=lm)([FactIn(EPISODE, ("Ann", "Bob", "Rex"),
                                              found=(Fact("Ann", "Rex", "Ann adopted Rex."),))])[0]
    assert [f.text for f in out.facts] == ["Bob thinks Rex is lucky."]
    assert "ALREADY EXTRACTED:\n- Ann adopted Rex." in lm.requests[0].messages[0]["content"]


def test_contradictions_name_the_pair_and_quote_the_new_fact():
    reply = {"closed": [{"existing": 2, "new": 1, "quote": "moved to  BERLIN"},
                        {"existing": 2, "new": 1, "quote": "moved to Berlin"}, {"existing": 9, "new": 1, "quote": "x"}]}
    lm = ReplayLM([json.dumps(reply)])
    stage = PromptedContradictionDetector(lm=lm)
    out = stage([ContradictIn(("Ann moved to Berlin.",), ("Ann has a dog.", "Ann lives in Paris.")),
                 ContradictIn(("Ann moved to Berlin.",), ())])
    assert out[0].closings == (Closing(1, 0, "moved to BERLIN"),) and out[0].contradicted == (1,)
    assert out[1].closings == () and len(lm.requests) == 1  # no existing fact: no call
    prompt = lm.requests[0].messages[0]["content"]
    assert "2. Ann lives in Paris." in prompt and "1. Ann moved to Berlin." in prompt
    assert stage.rejected_replies == 0


def test_invalidation_guard_refuses_unquoted_and_close_everything_replies():
    item = ContradictIn(("Ann moved to Berlin.",), ("Ann has a dog.", "Ann lives in Paris.", "Ann likes tea."))
    everything = {"closed": [{"existing": n, "new": 1, "quote": "moved to Berlin"} for n in (1, 2, 3)]}
    unquoted = {"closed": [{"existing": 2, "new": 1, "quote": "she relocated"},
                           {"existing": 3, "new": 1, "quote": "Berlin"}]}  # one word is no quote
    lm = ReplayLM([json.dumps(everything), json.dumps(unquoted)])
    stage = PromptedContradictionDetector(lm=lm)
    out = stage([item])[0]
    assert out.closings == () and stage.rejected_replies == 2 and len(stage.failures) == 1
    assert "every one of the 3 existing facts is closed" in lm.requests[1].messages[-1]["content"]
    assert lm.requests[1].messages[-1]["content"].startswith("Your previous reply breaks a rule")
    # a retry that keeps the rules is taken; a salvage keeps the quoted closings only
    good = {"closed": [{"existing": 2, "new": 1, "quote": "Ann moved to Berlin"}]}
    stage = PromptedContradictionDetector(lm=ReplayLM([json.dumps(unquoted), json.dumps(good)]))
    assert stage([item])[0].contradicted == (1,) and stage.rejected_replies == 1 and not stage.failures
    mixed = {"closed": [{"existing": 2, "new": 1, "quote": "moved to Berlin"}, {"existing": 1, "new": 1, "quote": "a dog"}]}
    stage = PromptedContradictionDetector(lm=ReplayLM([json.dumps(mixed)] * 2))
    assert stage([item])[0].contradicted == (1,) and stage.rejected_replies == 2
    # the unguarded detector (an ablation) takes the first reply as it comes
    stage = PromptedContradictionDetector(lm=ReplayLM([json.dumps(everything)]), enforce_rules=False)
    assert stage([item])[0].contradicted == (0, 1, 2) and stage.rejected_replies == 0


def test_categorizer_sends_appendix_d_as_system_and_user_and_merges_categories():
    reply = {"categories": [{"category": "Pets", "indexes": [0, 2, 7]}, {"category": "pets", "indexes": [2]},
                            {"category": "Places", "indexes": [1]}, {"category": "Nothing", "indexes": [9]}]}
    lm = ReplayLM([json.dumps(reply)])
    nodes = (NodeCard("Rex", ("Dog",)), NodeCard("Paris", ("City",)), NodeCard("Tom", ("Cat",)))
    out = PromptedCategorizer(lm=lm)([CategorizeIn(2, nodes, (NodeCard("Places"),), "- Rex, Tom -> Pets")])[0]
    assert [(c.name, c.members) for c in out.categories] == [("Pets", (0, 2)), ("Places", (1,))]
    system, user = lm.requests[0].messages
    assert system["role"] == "system" and "semantic categorization of nodes" in system["content"]
    assert "0. Rex: [Dog]" in user["content"] and "- Places: []" in user["content"]
    assert "You are currently at Layer 2" in user["content"] and "Previous Layer 1 categories" in user["content"]
    # the decoder may only write indexes of the given nodes (the 1.5B model counts on past them otherwise)
    categories = lm.requests[0].json_schema["properties"]["categories"]
    assert categories["items"]["properties"]["indexes"] == {"type": "array", "items": {"enum": [0, 1, 2]},
                                                           "minItems": 1, "maxItems": 3}
    assert categories["minItems"] == 1  # of 3 nodes one category may hold all


def test_categorizer_refuses_a_whole_batch_category_a_count_and_an_and_name():
    nodes = tuple(NodeCard(name) for name in ("Rex", "Tom", "Paris", "Berlin", "Ann", "Bob"))
    whole = {"categories": [{"category": "Family", "indexes": [0, 1, 2, 3, 4]}, {"category": "Cities", "indexes": [2, 3]}]}
    lm = ReplayLM([json.dumps(whole), json.dumps(whole)])
    stage = PromptedCategorizer(lm=lm)
    out = stage([CategorizeIn(1, nodes)])[0]
    assert [(c.name, c.members) for c in out.categories] == [("Cities", (2, 3))]  # the salvage: the rest
    assert stage.rejected_replies == 2 and len(stage.failures) == 1
    assert "'Family' holds 5 of the 6 nodes" in lm.requests[1].messages[-1]["content"]
    # the grammar holds the share rule too: at most half the nodes a category, at least two categories
    schema = lm.requests[0].json_schema["properties"]["categories"]
    assert schema["minItems"] == 2 and schema["items"]["properties"]["indexes"]["maxItems"] == 3
    many = tuple(NodeCard(f"n{i}") for i in range(12))
    count = {"categories": [{"category": "People", "indexes": [0, 1, 2, 3, 4, 5]}, {"category": "Pets", "indexes": [7, 9]}]}
    fixed = {"categories": [{"category": "People", "indexes": [0, 3, 5]}, {"category": "Pets", "indexes": [7, 9]}]}
    lm = ReplayLM([json.dumps(count), json.dumps(fixed)])
    stage = PromptedCategorizer(lm=lm)
    assert [c.members for c in stage([CategorizeIn(1, many)])[0].categories] == [(0, 3, 5), (7, 9)]
    assert stage.rejected_replies == 1 and "lists nodes 0 to 5 in order" in lm.requests[1].messages[-1]["content"]
    joined = {"categories": [{"category": "Food and Drinks", "indexes": [0, 3]}]}
    stage = PromptedCategorizer(lm=ReplayLM([json.dumps(joined)] * 2))
    out = stage([CategorizeIn(1, many)])[0]
    assert out.categories == () and out.error and stage.rejected_replies == 2
    # of three nodes two may share a concept; a whole small batch is not refused
    small = {"categories": [{"category": "Pets", "indexes": [0, 1, 2]}]}
    stage = PromptedCategorizer(lm=ReplayLM([json.dumps(small)]))
    assert stage([CategorizeIn(2, nodes[:3])])[0].categories[0].members == (0, 1, 2) and not stage.rejected_replies


def test_categorizer_naming_members_reads_names_into_indexes():
    nodes = tuple(NodeCard(name, (tag,)) for name, tag in (("Rex", "dog"), ("Tom", "cat"), ("Paris", "city"),
                                                            ("Berlin", "city"), ("Ann", "person")))
    reply = {"categories": [{"category": "Pets", "members": ["rex", "Tom", "Zeus"]},
                            {"category": "Cities", "members": ["Paris", "Berlin"]}]}
    lm = ReplayLM([json.dumps(reply)])
    stage = PromptedCategorizer(lm=lm, system_prompt="mnemis/category_system_names", refer_by="name")
    out = stage([CategorizeIn(1, nodes)])[0]
    assert [(c.name, c.members) for c in out.categories] == [("Pets", (0, 1)), ("Cities", (2, 3))]
    system, user = lm.requests[0].messages
    assert "list of node names, written exactly as given" in system["content"] and "indexes" not in system["content"]
    assert "- Rex: [dog]" in user["content"] and "0. Rex" not in user["content"]
    members = lm.requests[0].json_schema["properties"]["categories"]["items"]["properties"]["members"]
    assert members["items"] == {"enum": ["Rex", "Tom", "Paris", "Berlin", "Ann"]} and members["maxItems"] == 2
    whole = {"categories": [{"category": "Things", "members": ["Rex", "Tom", "Paris", "Berlin"]}]}
    stage = PromptedCategorizer(lm=ReplayLM([json.dumps(whole)] * 2), refer_by="name")
    assert stage([CategorizeIn(1, nodes)])[0].categories == () and stage.rejected_replies == 2  # the same rules


def test_describer_refuses_one_summary_for_two_people():
    shared = {"entities": [{"name": "Ann", "summary": "Ann and Bob talk about dogs.", "tags": ["friend"]},
                           {"name": "Bob", "summary": "Ann and Bob talk about dogs.", "tags": ["friend"]}]}
    own = {"entities": [{"name": "Ann", "summary": "Ann has a dog.", "tags": ["dog owner"]},
                        {"name": "Bob", "summary": "Bob asks about the dog.", "tags": ["friend"]}]}
    lm = ReplayLM([json.dumps(shared), json.dumps(own)])
    stage = PromptedEntityDescriber(lm=lm)
    out = stage([DescribeIn(EPISODE, ("Ann", "Bob"), ("", "Bob likes cats."))])[0]
    assert [d.summary for d in out.descriptions] == ["Ann has a dog.", "Bob asks about the dog."]
    assert stage.rejected_replies == 1 and "'Ann', 'Bob' were given the same summary" in lm.requests[1].messages[-1]["content"]
    # refused twice: a shared summary that names one of them stays with neither; the others keep theirs
    stage = PromptedEntityDescriber(lm=ReplayLM([json.dumps(shared)] * 2))
    out = stage([DescribeIn(EPISODE, ("Ann", "Bob"), ("", "Bob likes cats."))])[0]
    assert [d.summary for d in out.descriptions] == ["", "Bob likes cats."] and stage.rejected_replies == 2
    mine = {"entities": [{"name": "Ann", "summary": "Ann has a dog.", "tags": []},
                         {"name": "Rex", "summary": "Ann has a dog.", "tags": []}]}
    stage = PromptedEntityDescriber(lm=ReplayLM([json.dumps(mine)] * 2))
    out = stage([DescribeIn(EPISODE, ("Ann", "Rex"))])[0]
    assert [d.summary for d in out.descriptions] == ["Ann has a dog.", ""]  # kept for the name it mentions


def test_categorizer_reads_the_published_bare_list_too():
    lm = ReplayLM(['[{"category": "Pets", "indexes": [0, 1]}]'])
    out = PromptedCategorizer(lm=lm)([CategorizeIn(1, (NodeCard("Rex"), NodeCard("Tom")))])[0]
    assert [(c.name, c.members) for c in out.categories] == [("Pets", (0, 1))]


def test_global_selector_keeps_known_keys_with_their_take_all_flag():
    reply = {"selected": [{"name": "Pets", "uuid": "C1", "get_all_children": True},
                          {"name": "??", "uuid": "C9", "get_all_children": False},
                          {"name": "Rex", "uuid": "E0", "get_all_children": False}]}
    lm = ReplayLM([json.dumps(reply)])
    nodes = (HierarchyNode("C1", "Pets", ("Animals",), layer=1), HierarchyNode("E0", "Rex", ("Dog",)))
    out = PromptedGlobalSelector(lm=lm)([GlobalSelectIn("What is Ann's dog called?", nodes)])[0]
    assert [(s.key, s.all_children) for s in out.selected] == [("C1", True), ("E0", False)]
    prompt = lm.requests[0].messages[0]["content"]
    assert "- uuid: C1 | name: Pets | tags: Animals" in prompt and '"What is Ann\'s dog called?"' in prompt
    assert lm.requests[0].json_schema["properties"]["selected"]["items"]["properties"]["uuid"]["enum"] == ["C1", "E0"]
