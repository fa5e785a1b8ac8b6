"""The judges' positive control (memlab.eval.labels): the draw, the file's checks, the agreement
figures against hand-computed ones, and the committed labelled set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import ReplayLM

from memlab.eval.judge import CorrectWrongJudge
from memlab.eval.labels import (
    ITEM_FIELDS,
    LabelFileError,
    abstention_agreement,
    agreement,
    cohen_kappa,
    draw,
    judge_agreement,
    judge_labelled,
    judged_items,
    load_labels,
)

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "eval" / "judge_labels" / "positive_control_dev.json"
ERRATA = REPO.parent / "shared" / "data" / "locomo" / "audit" / "errata_dev.json"


def _row(question: int, category: str, prediction: str) -> dict:
    return {"question_id": f"c:q{question}", "conversation_id": "c", "category": category,
            "question": f"question {question}?", "gold": f"gold {question}", "prediction": prediction}


def test_the_draw_takes_each_category_in_turn_from_every_run_once_per_answer():
    runs = {"a": [_row(i, "temporal", f"answer {i}") for i in range(4)] + [_row(9, "single-hop", "x")],
            "b": [_row(i, "temporal", f"Answer  {i}") for i in range(2)] + [_row(5, "temporal", "other")]}
    items = draw(runs, {"temporal": 5, "single-hop": 3}, seed=1, audited={"c:q9": "the audited gold"})
    assert [tuple(item) for item in items] == [ITEM_FIELDS] * len(items)
    temporal = [item for item in items if item["category"] == "temporal"]
    assert len(temporal) == 5  # a and b's answers to q0 and q1 are one answer: each taken once
    assert len({(i["question_id"], i["prediction"].lower().replace("  ", " ")) for i in temporal}) == 5
    assert [i["half"] for i in temporal] == ["choose", "report", "choose", "report", "choose"]
    assert {i["run"] for i in temporal} == {"a", "b"}
    single = [item for item in items if item["category"] == "single-hop"]
    assert len(single) == 1 and single[0]["audited_gold"] == "the audited gold"  # fewer than asked: all there is
    assert all(i["label"] is None and i["id"] == f"{i['question_id']}@{i['run']}" for i in items)
    assert draw(runs, {"temporal": 5, "single-hop": 3}, seed=1) != draw(runs, {"temporal": 5, "single-hop": 3}, seed=2)


def _file(tmp_path, items, rule=("a rule",)) -> Path:
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"rule": list(rule), "drawn": {}, "items": items}))
    return path


def _item(n: int, label: str | None, half: str = "choose", category: str = "single-hop", prediction: str = "p") -> dict:
    return {"id": f"q{n}", "run": "r", "question_id": f"c:q{n}", "conversation_id": "c", "category": category,
            "question": f"question {n}?", "gold": f"gold {n}", "audited_gold": None, "prediction": prediction,
            "half": half, "label": label, "note": ""}


@pytest.mark.parametrize("change, named", [
    (lambda items: items[0].update(label="maybe"), "label 'maybe' is none of right, partial, wrong"),
    (lambda items: items[0].update(half="both"), "half 'both'"),
    (lambda items: items[1].update(id="q0"), "id 'q0' repeated"),
    (lambda items: items[0].pop("note"), "needs exactly the fields"),
])
def test_a_label_file_that_is_not_right_is_refused_by_name(tmp_path, change, named):
    items = [_item(0, "right"), _item(1, "wrong")]
    change(items)
    with pytest.raises(LabelFileError, match=named):
        load_labels(_file(tmp_path, items))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(LabelFileError, match="cannot be read as JSON"):
        load_labels(tmp_path / "broken.json")


def test_agreement_against_hand_computed_figures():
    # 4 right (judge accepts 3), 2 partial (accepts 1), 4 wrong (accepts 1), one without a verdict
    labels = ["right"] * 4 + ["partial"] * 2 + ["wrong"] * 4 + ["right"]
    verdicts = [True, True, True, False, True, False, True, False, False, False, None]
    items = [_item(n, label) for n, label in enumerate(labels)]
    result = agreement(items, {f"q{n}": v for n, v in enumerate(verdicts)}, resamples=200)
    assert result["n"] == 11 and result["no_verdict"] == 1
    assert (result["accepts_right"]["accepted"], result["accepts_right"]["n"]) == (3, 4)
    assert (result["accepts_partial"]["accepted"], result["accepts_wrong"]["accepted"]) == (1, 1)
    low, high = result["accepts_right"]["ci"]
    assert low < 0.75 < high
    # right vs wrong, partial left out: observed 6/8; expected 0.5*0.5 + 0.5*0.5 = 0.5; kappa = 0.5
    assert result["kappa"]["value"] == pytest.approx(0.5) and result["kappa"]["n"] == 8
    assert result["kappa"]["ci"][0] <= 0.5 <= result["kappa"]["ci"][1]
    assert cohen_kappa([True, True], [True, True]) is None  # both constant alike: undefined
    assert cohen_kappa([True, False], [False, True]) == pytest.approx(-1.0)


def test_a_judge_is_asked_with_the_audited_gold_and_measured_per_half():
    asked = []

    def reply(request):
        prompt = request.messages[-1]["content"]
        asked.append(prompt)
        return json.dumps({"label": "CORRECT" if "the audited" in prompt else "WRONG"})

    items = [_item(0, "right"), {**_item(1, "right", half="report"), "audited_gold": "the audited gold"},
             _item(2, "wrong", category="adversarial")]
    judge = CorrectWrongJudge(lm=ReplayLM(reply))
    tree = {"rule": [], "items": items}
    verdicts = judge_labelled(judge, judged_items(tree))
    assert verdicts == {"q0": False, "q1": True} and len(asked) == 2  # the adversarial item is not judged
    result = judge_agreement(tree, verdicts)
    assert result["all"]["accepts_right"]["accepted"] == 1
    assert result["choose"]["n"] == 1 and result["report"]["accepts_right"]["rate"] == 1.0


def test_the_abstention_detector_is_measured_on_the_adversarial_items():
    items = [_item(0, "right", category="adversarial", prediction="I do not have enough information in my memory."),
             _item(1, "wrong", category="adversarial", prediction="Sweden")]
    result = abstention_agreement({"rule": [], "items": items})
    assert result["accepts_right"]["accepted"] == 1 and result["accepts_wrong"]["accepted"] == 0


def test_the_committed_set_is_labelled_by_its_rule_and_is_the_draw_it_says():
    tree = load_labels(COMMITTED)
    items = tree["items"]
    assert len(items) >= 300 and all(item["label"] in ("right", "partial", "wrong") for item in items)
    assert {item["category"] for item in items} == {"multi-hop", "temporal", "open-domain", "single-hop", "adversarial"}
    assert sum(item["label"] == "right" for item in items) >= 100
    assert any("calendar" in line for line in tree["rule"])
    if not ERRATA.is_file():
        pytest.skip("the audit's errata are in ../shared")
    drawn = tree["drawn"]
    runs = {name: [json.loads(line) for line in (REPO / folder / "predictions.jsonl").read_text().splitlines()]
            for name, folder in drawn["runs"].items()}
    audited = {f"{e['conversation']}:q{e['qa_index']}": e["correct_answer"] for e in json.loads(ERRATA.read_text())
               if str(e.get("correct_answer")).strip() != str(e.get("golden_answer")).strip()}
    again = draw(runs, drawn["quotas"], drawn["seed"], audited)
    fields = ("id", "question", "gold", "audited_gold", "prediction", "half")
    assert [{f: i[f] for f in fields} for i in again] == [{f: i[f] for f in fields} for i in items]
