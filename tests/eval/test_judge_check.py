"""memlab check-judge: a judge's acceptance of gold and of wrong answers, per set and category."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.eval.judge import CorrectWrongJudge
from memlab.eval.judge_audit import check_judge, load_audit_items
from tests.fakes import ReplayLM

AUDIT = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "locomo" / "audit"


def audit_folder(tmp_path: Path) -> Path:
    rows = [("conv-1", 0, 2, "When did Ann move?", "7 May 2023", "12 April 2023", "Sometime in spring"),
            ("conv-1", 1, 4, "What does Bob teach?", "Chemistry", "Biology", "A science subject"),
            ("conv-2", 0, 4, "Who is Cat's dog?", "Rex", "Max", "A pet")]
    for name, wrong in (("specific", 5), ("vague", 6)):
        (tmp_path / f"wrong_answers_{name}_dev.jsonl").write_text("".join(
            json.dumps({"conversation": r[0], "qa_index": r[1], "category": r[2], "question": r[3],
                        "golden_answer": r[4], "wrong_answer": r[wrong], "reference_judge_accepted": name == "vague"})
            + "\n" for r in rows))
    return tmp_path


def test_a_lenient_judge_is_flagged_and_counted_per_set_and_category(tmp_path):
    items = load_audit_items(audit_folder(tmp_path))
    assert len(items) == 3 and items[0]["category"] == "temporal" and items[0]["vague_wrong"] == "Sometime in spring"

    def generous(request):  # rejects only answers that name another specific thing
        prompt = request.messages[-1]["content"]
        return '{"label": "WRONG"}' if any(w in prompt for w in ("12 April", "Biology", "Max")) else '{"label": "CORRECT"}'

    result = check_judge(CorrectWrongJudge(lm=ReplayLM(generous)), items)
    assert result["sets"]["gold"]["rate"] == 1.0 and result["sets"]["specific_wrong"]["rate"] == 0.0
    vague = result["sets"]["vague_wrong"]
    assert (vague["accepted"], vague["judged"], vague["reference_rate"]) == (3, 3, 1.0) and result["lenient"]
    assert result["by_category"]["single-hop"]["vague_wrong"]["judged"] == 2
    assert 0.0 < vague["ci"]["low"] < 1.0 == pytest.approx(vague["ci"]["high"])
    assert len(load_audit_items(tmp_path, {"conv-2"})) == 1
    assert len(load_audit_items(tmp_path, None, 1)) == 2  # one per conversation


def test_bad_audit_files_and_configs_are_one_error(tmp_path, caplog):
    out, audit = str(tmp_path / "out" / "check.json"), tmp_path / "audit"
    audit.mkdir()
    check = ["check-judge", "configs/judges/correct_wrong.yaml", "--audit", str(audit), "--out", out]
    assert main(check) == 2
    assert "cannot read it" in caplog.text
    audit_folder(audit)
    (audit / "wrong_answers_vague_dev.jsonl").write_text('{"conversation": "conv-1"}\n')
    assert main(check) == 2
    assert "wrong_answers_vague_dev.jsonl: line 1" in caplog.text
    audit_folder(audit)
    not_a_judge = tmp_path / "normalizer.yaml"
    not_a_judge.write_text("_component_: memlab.stages.temporal.RuleTemporalNormalizer\n")
    assert main(["check-judge", str(not_a_judge), "--audit", str(audit), "--out", out]) == 2
    assert "builds a RuleTemporalNormalizer, not a judge" in caplog.text and not Path(out).exists()
    (tmp_path / "labels.json").write_text("{}")
    assert main(check + ["--labels", str(tmp_path / "labels.json")]) == 2
    assert "needs an object with a 'rule' list" in caplog.text and not Path(out).exists()


def test_a_check_is_written_with_its_positive_control(tmp_path, monkeypatch, capsys):
    labels = {"rule": ["right: names the pet"], "items": [
        {"id": f"q{n}", "run": "r", "question_id": f"q{n}", "conversation_id": "conv-2", "category": "single-hop",
         "question": "Who is Cat's dog?", "gold": "Rex", "audited_gold": None, "prediction": said, "half": half,
         "label": label, "note": ""}
        for n, (said, label, half) in enumerate([("Rex", "right", "choose"), ("Max", "wrong", "report")])]}
    (tmp_path / "labels.json").write_text(json.dumps(labels))
    # The shipped config, its model replaced by a replaying one (only memlab classes are built from YAML).
    monkeypatch.setattr("memlab.config.instantiate", lambda node: CorrectWrongJudge(ReplayLM(
        lambda r: '{"label": "WRONG"}' if "Max" in r.messages[-1]["content"] else '{"label": "CORRECT"}')))
    out = tmp_path / "check.json"
    (tmp_path / "audit").mkdir()
    assert main(["check-judge", "configs/judges/correct_wrong.yaml", "--audit", str(audit_folder(tmp_path / "audit")),
                 "--labels", str(tmp_path / "labels.json"), "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["config"] == "configs/judges/correct_wrong.yaml" and written["questions"] == 3
    assert written["sets"]["specific_wrong"]["accepted"] == 2  # "12 April 2023" and "Biology": no "Max" in them
    control = written["positive_control"]["all"]
    assert control["accepts_right"]["accepted"] == 1 and control["accepts_wrong"]["accepted"] == 0
    assert json.loads(capsys.readouterr().out)["accepts_right"] == 1.0
    # the labels alone: a candidate's first look, no audit verdict paid for
    alone = tmp_path / "labels_only.json"
    assert main(["check-judge", "configs/judges/correct_wrong.yaml", "--labels", str(tmp_path / "labels.json"),
                 "--out", str(alone)]) == 0
    written = json.loads(alone.read_text())
    assert "sets" not in written and written["positive_control"]["all"]["accepts_right"]["accepted"] == 1
    assert main(["check-judge", "configs/judges/correct_wrong.yaml", "--out", str(alone)]) == 2


def test_the_audit_sets_load_for_all_1035_dev_questions():
    if not AUDIT.is_dir():
        pytest.skip("../shared/data/locomo/audit is not available")
    items = load_audit_items(AUDIT)
    assert len(items) == 1035
    assert {item["category"] for item in items} == {"multi-hop", "temporal", "open-domain", "single-hop"}
