"""eval/judge_check.py: a judge's acceptance of gold and of wrong answers, per set and category."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.eval.judge import CorrectWrongJudge
from tests.eval_scripts import eval_script
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
    script = eval_script("judge_check")
    items = script.load_items(audit_folder(tmp_path), None, None)
    assert len(items) == 3 and items[0]["category"] == "temporal" and items[0]["vague_wrong"] == "Sometime in spring"

    def generous(request):  # rejects only answers that name another specific thing
        prompt = request.messages[-1]["content"]
        return '{"label": "WRONG"}' if any(w in prompt for w in ("12 April", "Biology", "Max")) else '{"label": "CORRECT"}'

    result = script.check_judge(CorrectWrongJudge(lm=ReplayLM(generous)), items)
    assert result["sets"]["gold"]["rate"] == 1.0 and result["sets"]["specific_wrong"]["rate"] == 0.0
    vague = result["sets"]["vague_wrong"]
    assert (vague["accepted"], vague["judged"], vague["reference_rate"]) == (3, 3, 1.0) and result["lenient"]
    assert result["by_category"]["single-hop"]["vague_wrong"]["judged"] == 2
    assert 0.0 < vague["ci"]["low"] < 1.0 == pytest.approx(vague["ci"]["high"])
    assert len(script.load_items(tmp_path, {"conv-2"}, None)) == 1
    assert len(script.load_items(tmp_path, None, 1)) == 2  # one per conversation


def test_bad_audit_files_and_configs_are_one_error(tmp_path, capsys):
    script = eval_script("judge_check")
    out = str(tmp_path / "out.json")
    assert script.main(["configs/judges/correct_wrong.yaml", "--audit", str(tmp_path), "--out", out]) == 2
    assert "cannot read it" in capsys.readouterr().err
    audit_folder(tmp_path)
    (tmp_path / "wrong_answers_vague_dev.jsonl").write_text('{"conversation": "conv-1"}\n')
    assert script.main(["configs/judges/correct_wrong.yaml", "--audit", str(tmp_path), "--out", out]) == 2
    assert "wrong_answers_vague_dev.jsonl: line 1" in capsys.readouterr().err
    audit_folder(tmp_path)
    not_a_judge = tmp_path / "rag.yaml"
    not_a_judge.write_text("_component_: memlab.stages.temporal.RuleTemporalNormalizer\n")
    assert script.main([str(not_a_judge), "--audit", str(tmp_path), "--out", out]) == 2
    assert "builds a RuleTemporalNormalizer, not a judge" in capsys.readouterr().err and not Path(out).exists()


def test_the_audit_sets_load_for_all_1035_dev_questions():
    if not AUDIT.is_dir():
        pytest.skip("../shared/data/locomo/audit is not available")
    items = eval_script("judge_check").load_items(AUDIT, None, None)
    assert len(items) == 1035
    assert {item["category"] for item in items} == {"multi-hop", "temporal", "open-domain", "single-hop"}
