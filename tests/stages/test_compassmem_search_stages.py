"""CompassMem's prompted search stages (appendix F.2): planner, refiner, start-node selector and
navigator. Rendering the published prompts, reading the line formats a small model writes, and
the fallbacks through ``forward`` (ReplayLM)."""

from __future__ import annotations

from datetime import datetime

import pytest

from memlab.lm.errors import ParseError
from memlab.prompts import load_prompt
from memlab.stages.event_view import EventView
from memlab.stages.line_format import node_keys, says_none
from memlab.stages.navigate import NavigateIn, Neighbour, PromptedNavigator
from memlab.stages.refine import PromptedQueryRefiner, RefineIn
from memlab.stages.select import Candidate, PromptedNodeSelector, SelectIn
from memlab.stages.subgoal import PromptedSubgoalPlanner, SubgoalIn
from tests.fakes import ReplayLM

MAY_7 = datetime(2023, 5, 7, 14, 0)


def view(key: str, summary: str, date: datetime | None = None, *people: str) -> EventView:
    return EventView(key=key, summary=summary, participants=tuple(people), date=date)


def prompt_of(request) -> str:
    return request.messages[-1]["content"]


@pytest.mark.parametrize("name, placeholders", [
    ("plan_subgoals", {"question"}),
    ("refine_query", {"original_question", "satisfied_text", "unsatisfied_text", "context_so_far"}),
    ("select_nodes", {"question", "subgoals_text", "nodes_text"}),
    ("select_cluster_nodes", {"question", "nodes_text"}),
    ("action_decision", {"question", "subgoals_text", "kept_nodes_info", "current_info", "neighbor_info"}),
])
def test_templates_are_the_published_prompts_with_plain_placeholders(name, placeholders):
    prompt = load_prompt(f"compassmem/{name}")
    assert prompt.status == "published" and "appendix F.2" in prompt.source
    assert prompt.placeholders == placeholders
    assert "$" not in prompt.body and "```" not in prompt.body and " \n" not in prompt.body


# -- planner ----------------------------------------------------------------------------------------
def test_planner_renders_the_strategic_planning_prompt():
    stage = PromptedSubgoalPlanner(lm=ReplayLM([]))
    request = stage.render(SubgoalIn("Where did Ann travel after her wedding?", MAY_7))
    text = prompt_of(request)
    assert text.startswith("You are a strategic planning assistant.")
    assert "# QUESTION: Where did Ann travel after her wedding?" in text
    assert "Sub-goal 1: [First specific information need]" in text and "{" not in text
    assert request.max_tokens == 160 and request.stop == () and request.json_schema is None


def test_planner_reads_sub_goal_lines_leniently():
    reply = ("Here are the sub-goals:\n\n**Sub-goal 1:** [Find where Ann's wedding took place]\n"
             "- Subgoal 2) When did Ann travel?\n### SUB-GOAL 3 - where did ann travel\n"
             "sub-goal 4: When did Ann travel.\nSub-goal 5: Where did Ann travel?\nThat covers it.")
    out = PromptedSubgoalPlanner(lm=ReplayLM([])).parse(reply, SubgoalIn("q"))
    assert out.subgoals == ("Find where Ann's wedding took place", "When did Ann travel?", "where did ann travel")


def test_planner_keeps_at_most_five_and_accepts_one():
    stage = PromptedSubgoalPlanner(lm=ReplayLM([]))
    many = "\n".join(f"Sub-goal {i}: need number {i}" for i in range(1, 8))
    assert stage.parse(many, SubgoalIn("q")).subgoals == tuple(f"need number {i}" for i in range(1, 6))
    assert stage.parse("Sub-goal 1: Ann's home town", SubgoalIn("q")).subgoals == ("Ann's home town",)


@pytest.mark.parametrize("reply", [
    "1. Ann's wedding\n2. Her trip",  # no "Sub-goal N:" lines
    "REASONING: the question asks about a trip.",
    "Sub-goal 1: [First specific information need]\nSub-goal 2: [Second specific information need]",
    "Sub-goal 1:",
])
def test_planner_refuses_replies_without_sub_goals(reply):
    with pytest.raises(ParseError):
        PromptedSubgoalPlanner(lm=ReplayLM([])).parse(reply, SubgoalIn("q"))


def test_planner_falls_back_to_the_question():
    lm = ReplayLM(["I cannot help.", "Still nothing."])
    stage = PromptedSubgoalPlanner(lm=lm)
    out = stage.run_one(SubgoalIn("Where did Ann travel?"))
    assert out.subgoals == ("Where did Ann travel?",) and out.error
    assert len(stage.failures) == 1 and len(lm.requests) == 2


# -- refiner ----------------------------------------------------------------------------------------
REFINE = RefineIn("Where did Ann go after the wedding?",
                  ("Where was the wedding?", "Where did Ann go next?", "When did she leave?"),
                  (True, False, False), ("N3 [7 May 2023] Ann attended a wedding in Rome.",))


def test_refiner_renders_sub_goals_under_their_own_numbers():
    request = PromptedQueryRefiner(lm=ReplayLM([])).render(REFINE)
    text = prompt_of(request)
    assert text.startswith("You are an assistant whose role is to generate a refined search query")
    assert "ORIGINAL QUESTION: Where did Ann go after the wedding?" in text
    assert "Satisfied sub-goals:\n1. Where was the wedding?\nUnsatisfied sub-goals:\n2. Where did Ann go next?\n" \
           "3. When did she leave?" in text
    assert "INFORMATION COLLECTED SO FAR:\nN3 [7 May 2023] Ann attended a wedding in Rome." in text
    assert request.stop == ("Reasoning:", "REASONING:", "Explanation:", "EXPLANATION:") and request.max_tokens == 96
    empty = prompt_of(PromptedQueryRefiner(lm=ReplayLM([])).render(
        RefineIn("q", ("a",), (False,))))
    assert "Satisfied sub-goals:\n(none)" in empty and "(No information collected yet)" in empty


@pytest.mark.parametrize("reply, query, targets", [
    ("New Query: Ann's trip after the Rome wedding\nTarget Sub-goals: [2, 3]", "Ann's trip after the Rome wedding", (1, 2)),
    ("**New Query:** [Where did Ann fly in May 2023?]\n**Target Sub-goals:** 2, 9, 2", "Where did Ann fly in May 2023?", (1,)),
    ("New Query: \"Ann departure date\" Target Sub-goals: [3]", "Ann departure date", (2,)),
    ("Here is the refined query:\n\nNew query:\nAnn travel destination\n\nThis query targets sub-goal 2.",
     "Ann travel destination", ()),
    ("new query: Ann's destination\ntarget sub-goals: NONE", "Ann's destination", ()),
])
def test_refiner_reads_the_query_and_its_targets(reply, query, targets):
    out = PromptedQueryRefiner(lm=ReplayLM([])).parse(reply, REFINE)
    assert (out.query, out.targets, out.error) == (query, targets, None)


@pytest.mark.parametrize("reply", [
    "Reasoning: sub-goal 2 is missing, so we should look for the trip.",
    "New Query: []\nTarget Sub-goals: [2]",
    "New Query: [Your refined search query - single clear question or search phrase targeting unsatisfied sub-goals]",
])
def test_refiner_refuses_replies_without_a_query(reply):
    with pytest.raises(ParseError):
        PromptedQueryRefiner(lm=ReplayLM([])).parse(reply, REFINE)


def test_refiner_falls_back_to_the_unsatisfied_sub_goals():
    lm = ReplayLM(["no idea", "REASONING: none"])
    stage = PromptedQueryRefiner(lm=lm)
    out = stage.run_one(REFINE)
    assert out.query == "Where did Ann go next? When did she leave?" and out.targets == (1, 2) and out.error
    assert len(stage.failures) == 1 and lm.requests[1].stop == PromptedQueryRefiner.STOP


# -- start-node selector ----------------------------------------------------------------------------
DENSE = SelectIn("Where did Ann go after the wedding?",
                 ((Candidate(view("N3", "Ann attended a wedding in Rome.", MAY_7, "Ann", "Bo"), 0.712),
                   Candidate(view("N5", "Ann flew to Paris."), 0.64),
                   Candidate(view("N12", "Bo bought shoes."), 0.31)),),
                 subgoals=("Where was the wedding?", "Where did Ann go next?"))
CLUSTERS = SelectIn("Where did Ann go after the wedding?",
                    ((Candidate(view("N1", "Ann got engaged."), 0.5), Candidate(view("N2", "Ann planned a wedding."), 0.6),
                      Candidate(view("N4", "Ann chose a dress."), 0.4), Candidate(view("N6", "Ann sent invites."), 0.3)),
                     (Candidate(view("N9", "Ann flew to Paris."), 0.55),), ()),
                    per_group=3, limit=5)


def test_selector_renders_candidates_with_their_similarity():
    request = PromptedNodeSelector(lm=ReplayLM([])).render(DENSE)
    text = prompt_of(request)
    assert text.startswith("You are selecting the most promising memory nodes to explore for answering a question.")
    assert "QUESTION: Where did Ann go after the wedding?\nSUB-GOALS:\n1. Where was the wedding?\n" \
           "2. Where did Ann go next?\n" in text
    assert "CANDIDATE NODES (retrieved by semantic similarity):\n" \
           "N3 (similarity 0.71) [7 May 2023] (Ann, Bo) Ann attended a wedding in Rome.\n" \
           "N5 (similarity 0.64) Ann flew to Paris.\nN12 (similarity 0.31) Bo bought shoes." in text
    assert "Consider both the summary content and the similarity score." in text and "Cluster" not in text
    assert request.stop == ("Reasoning:", "REASONING:", "Reason:", "REASON:") and request.max_tokens == 64


def test_cluster_prompt_lists_nodes_under_cluster_headers():
    text = prompt_of(PromptedNodeSelector(lm=ReplayLM([]), prompt="compassmem/select_cluster_nodes").render(CLUSTERS))
    assert text.startswith("You are selecting the most relevant memory node(s) to answer a question.")
    assert "AVAILABLE NODES:\n\nCluster 1:\nN1 (similarity 0.50) Ann got engaged.\n" in text
    assert "N6 (similarity 0.30) Ann sent invites.\n\nCluster 2:\nN9 (similarity 0.55) Ann flew to Paris.\n\n#" in text
    assert "Cluster 3" not in text and "Maximum 3 nodes: Select at most 3 nodes per cluster." in text


@pytest.mark.parametrize("reply, selected", [
    ("Selected Nodes: [N5, N3]\n\nReasoning: N5 is the trip.", ("N5", "N3")),
    ("**Selected Nodes:** N5, n3", ("N5", "N3")),
    ("selected nodes: [N5], node N12, N99, N5", ("N5", "N12")),
    ("Selected Nodes: 5, 12", ("N5", "N12")),
    ("Selected Nodes: N3 [7 May 2023] (Ann, Bo) Ann attended a wedding in Rome.", ("N3",)),
    ("Selected Nodes:\n- N12\n- N5\n\nN3 is less relevant.", ("N12", "N5")),
    ("I would explore [N5] first.", ("N5",)),
    ("Selected Nodes: NONE", ()),
    ("Selected Nodes: []", ()),
])
def test_selector_reads_the_selected_nodes_line(reply, selected):
    out = PromptedNodeSelector(lm=ReplayLM([])).parse(reply, DENSE)
    assert out.selected == selected and out.error is None


def test_selector_keeps_the_cluster_and_total_limits_and_reads_every_line():
    stage = PromptedNodeSelector(lm=ReplayLM([]), prompt="compassmem/select_cluster_nodes")
    out = stage.parse("Selected Nodes: [N1, N2, N4, N6]\nCluster 2:\nSelected Nodes: [N9]", CLUSTERS)
    assert out.selected == ("N1", "N2", "N4", "N9")


@pytest.mark.parametrize("reply", [
    "Selected Nodes: [NODE_ID1, NODE_ID2, ...]",
    "Selected Nodes: [N40, N41]",
    "Reasoning: the wedding is in 2023 and the trip in May.",
    "Selected Nodes:",
])
def test_selector_refuses_replies_naming_no_candidate(reply):
    with pytest.raises(ParseError):
        PromptedNodeSelector(lm=ReplayLM([])).parse(reply, DENSE)


def test_selector_falls_back_to_the_best_of_each_group_and_skips_empty_items():
    lm = ReplayLM(["Reasoning: hmm", "Selected Nodes: [N77]"])
    stage = PromptedNodeSelector(lm=lm)
    empty, out = stage([SelectIn("q", ((), ())), CLUSTERS])
    assert empty.selected == () and empty.error is None
    assert out.selected == ("N2", "N9") and out.error
    assert len(lm.requests) == 2 and len(stage.failures) == 1


# -- navigator --------------------------------------------------------------------------------------
NAVIGATE = NavigateIn(
    question="Where did Ann go after the wedding?",
    subgoals=("Where was the wedding?", "Where did Ann go next?", "When did she leave?"),
    satisfied=(True, False, False),
    node=view("N3", "Ann attended a wedding in Rome.", MAY_7, "Ann"),
    neighbours=(Neighbour(view("N7", "Ann flew to Paris.", datetime(2023, 5, 9)), "causal"),
                Neighbour(view("N12", "Bo bought shoes."), "<- temporal"),
                Neighbour(view("N15", "Ann visited the Louvre."), "temporal"),
                Neighbour(view("N21", "Ann came home."), "temporal")),
    kept=(view("N1", "Ann was invited to a wedding in Rome."),),
)


def test_navigator_renders_the_action_decision_prompt():
    request = PromptedNavigator(lm=ReplayLM([])).render(NAVIGATE)
    text = prompt_of(request)
    assert text.startswith("You are an expert information evaluator.")
    assert "satisfied by this node + previously kept information" in text
    assert "QUESTION: Where did Ann go after the wedding?\nSUB-GOALS:\n1. Where was the wedding? [SATISFIED]\n" \
           "2. Where did Ann go next?\n3. When did she leave?\n" in text
    assert "PREVIOUSLY KEPT INFORMATION:\nN1 Ann was invited to a wedding in Rome.\n" in text
    assert "CURRENT NODE INFORMATION:\nN3 [7 May 2023] (Ann) Ann attended a wedding in Rome.\n" in text
    assert "NEIGHBOR NODES (available for exploration):\nN7 (causal) [9 May 2023] Ann flew to Paris.\n" \
           "N12 (<- temporal) Bo bought shoes.\n" in text
    assert text.endswith("Now, make your decision:") and "{" not in text
    assert request.stop == ("REASONING:", "Reasoning:", "REASONING**:", "Reasoning**:") and request.max_tokens == 96
    bare = prompt_of(PromptedNavigator(lm=ReplayLM([])).render(
        NavigateIn("q", ("a",), (False,), view("N3", "x"))))
    assert "PREVIOUSLY KEPT INFORMATION:\n(No information kept yet)" in bare
    assert "NEIGHBOR NODES (available for exploration):\n(none)" in bare


@pytest.mark.parametrize("reply, action, next_nodes, satisfied", [
    ("ACTION: EXPAND\nNEXT_NODES: [N7, N15]\nSATISFIED_SUBGOALS: [1, 2]\nREASONING: Rome and Paris.",
     "EXPAND", ("N7", "N15"), (0, 1)),
    ("**ACTION:** expand\n**NEXT_NODES:** N7\n**SATISFIED_SUBGOALS:** 2", "EXPAND", ("N7",), (1,)),
    ("Action: [Answer]\nNext nodes: NONE\nSatisfied sub-goals: [1, 2, 3]", "ANSWER", (), (0, 1, 2)),
    ("ACTION: SKIP\nNEXT_NODES: [node N7, N99, 12]\nSATISFIED_SUBGOALS: [2]", "SKIP", ("N7",), ()),
    ("ACTION: EXPAND NEXT_NODES: [7, 12] SATISFIED_SUBGOALS: [0, 2, 4, 2]", "EXPAND", ("N7", "N12"), (1,)),
    ("ACTION: EXPAND\nNEXT_NODES: [N7, N12, N15, N21]\nSATISFIED_SUBGOALS: []", "EXPAND", ("N7", "N12", "N15"), ()),
    ("Let me check the sub-goals.\n\n### ACTION: EXPAND (not ANSWER: sub-goal 3 is open)\nNEXT_NODES: [N21]",
     "EXPAND", ("N21",), ()),
    ("ACTION: [SKIP/EXPAND/ANSWER]\n...\nACTION: SKIP\nNEXT_NODES: NONE", "SKIP", (), ()),
])
def test_navigator_reads_decisions_leniently(reply, action, next_nodes, satisfied):
    out = PromptedNavigator(lm=ReplayLM([])).parse(reply, NAVIGATE)
    assert (out.action, out.next_nodes, out.satisfied, out.error) == (action, next_nodes, satisfied, None)


@pytest.mark.parametrize("reply", [
    "REASONING: The node tells where the wedding was, which satisfies sub-goal 1.",
    "ACTION: [SKIP/EXPAND/ANSWER]\nNEXT_NODES: [N7]",
    "ACTION: continue\nNEXT_NODES: [N7]",
    "EXPAND\nN7",
    "",
])
def test_navigator_refuses_replies_without_an_action(reply):
    with pytest.raises(ParseError):
        PromptedNavigator(lm=ReplayLM([])).parse(reply, NAVIGATE)


def test_navigator_falls_back_to_expand_and_counts_the_failure():
    lm = ReplayLM(["REASONING: the wedding was in Rome", "I think we should keep it."])
    stage = PromptedNavigator(lm=lm)
    out = stage.run_one(NAVIGATE)
    assert (out.action, out.next_nodes, out.satisfied) == ("EXPAND", (), ()) and out.error and out.keeps
    assert len(stage.failures) == 1 and len(lm.requests) == 2
    assert lm.requests[1].stop == PromptedNavigator.STOP and len(lm.requests[1].messages) == 3


def test_a_corrected_retry_is_used():
    lm = ReplayLM(["REASONING: hmm", "ACTION: ANSWER\nNEXT_NODES: NONE\nSATISFIED_SUBGOALS: [1, 2, 3]"])
    stage = PromptedNavigator(lm=lm)
    out = stage.run_one(NAVIGATE)
    assert out.action == "ANSWER" and out.satisfied == (0, 1, 2) and out.error is None and not stage.failures


# -- shared reading helpers -------------------------------------------------------------------------
def test_node_keys_reads_numbers_only_when_no_key_is_named():
    keys = ["N3", "N7", "N12"]
    assert node_keys("[N7], node 12, 3", keys) == ["N7", "N12"]
    assert node_keys("7 and 3", keys) == ["N7", "N3"]
    assert node_keys("7 and 3", keys, bare=False) == []
    assert node_keys("NODE_ID1, similarity 0.71, N7s", keys) == []
    assert node_keys("n 7, N8", keys) == ["N7", "N8"]
    assert node_keys("9" * 5000, keys) == []


@pytest.mark.parametrize("value, empty", [
    ("NONE", True), ("[NONE]", True), ("[]", True), ("**None**", True), ("No nodes", True),
    ("[N7]", False), ("", False), ("Nonetheless N7", False),
])
def test_says_none(value, empty):
    assert says_none(value) is empty


def test_the_stages_save_their_settings_and_load_with_an_lm(tmp_path):
    from memlab.stage import Stage

    stage = PromptedNodeSelector(lm=ReplayLM([]), prompt="compassmem/select_cluster_nodes", max_tokens=48)
    loaded = Stage.load(stage.save(tmp_path / "select"), lm=ReplayLM([]))
    assert isinstance(loaded, PromptedNodeSelector) and loaded.max_tokens == 48
    assert loaded.prompt.id == "compassmem/select_cluster_nodes"
