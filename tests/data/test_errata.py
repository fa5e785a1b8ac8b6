"""Audited gold: an errata file's corrections reach the scores beside the original gold, and a
file that does not fit the data is refused naming the file and the entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.data import DataError, load_sample
from memlab.data.errata import apply_errata, load_errata
from memlab.eval.runner import RunOptions, run_benchmark, run_config
from memlab.pipelines.fullcontext import FullContext
from memlab.stages.answer import PromptedAnswerer
from tests.fakes import ReplayLM

REPO = Path(__file__).resolve().parents[2]
# q0 "What subject does Tomas teach?" (gold Chemistry, D1:2); q1 the sourdough starter (Bubbles, D2:9)
ANSWER_FIX = {"conversation": "sample-1", "qa_index": 0, "question": "What subject does Tomas teach?",
              "error_type": "HALLUCINATION", "golden_answer": "Chemistry", "correct_answer": "Organic chemistry",
              "cited_evidence": ["D1:2"], "correct_evidence": ["D1:2"], "reasoning": "a note"}
CITATION_FIX = {"conversation": "sample-1", "qa_index": 1, "question": "What is the name of Tomas's sourdough starter?",
                "error_type": "WRONG_CITATION", "golden_answer": "Bubbles", "correct_answer": "Bubbles (a typo here)",
                "cited_evidence": ["D2:9"], "correct_evidence": ["D2:8", "D2:9"]}


def errata_file(tmp_path: Path, entries: list) -> Path:
    path = tmp_path / "errata.json"
    path.write_text(json.dumps(entries))
    return path


def test_an_answer_and_a_citation_are_corrected_beside_the_original_gold(tmp_path):
    path = errata_file(tmp_path, [ANSWER_FIX, CITATION_FIX, {**ANSWER_FIX, "conversation": "conv-99"}])
    conversations, applied = apply_errata(load_sample(), load_errata(path), path)
    assert applied == {"file": str(path), "entries": 3, "applied": 2, "answers_changed": 1, "evidence_changed": 1,
                       "not_loaded": 1}
    q0, q1, q2 = conversations[0].questions[:3]
    assert (q0.answer, q0.audited.answer, q0.audited.error_type) == ("Chemistry", "Organic chemistry", "HALLUCINATION")
    # a wrong citation changes the evidence only: the audit's answer text is not read for it
    assert (q1.answer, q1.audited.answer, q1.evidence, q1.audited.evidence) == (
        "Bubbles", "Bubbles", ("D2:9",), ("D2:8", "D2:9"))
    assert q2.audited is None


@pytest.mark.parametrize("entries, problem", [
    ({"not": "a list"}, "an errata file is a JSON list of corrections, found dict"),
    ([ANSWER_FIX, {**CITATION_FIX, "question": "What is the name of Tomas's dog?"}],
     r"entry 1 \(sample-1:q1\): its question .*dog.* is not the data's"),
    ([{**ANSWER_FIX, "correct_evidence": ["D1:99"]}], r"entry 0 \(sample-1:q0\): correct_evidence \['D1:99'\] names no turn"),
    ([{**ANSWER_FIX, "error_type": "TYPO"}], "entry 0 .*error_type 'TYPO' is not one of"),
    ([{**ANSWER_FIX, "qa_index": "0"}], "entry 0 .*'qa_index' must be an integer"),
    ([{**ANSWER_FIX, "correct_answer": ""}], "entry 0: 'correct_answer' must be a non-empty string"),
    ([{**ANSWER_FIX, "correct_evidence": "D1:2"}], "entry 0 .*'correct_evidence' must be a list"),
    # issue 82: conflicting duplicates, an index the conversation does not have
    ([ANSWER_FIX, CITATION_FIX, {**ANSWER_FIX, "correct_answer": "Physics"}],
     "entries 0 and 2 both correct sample-1:q0, differently"),
    ([{**ANSWER_FIX, "qa_index": 999}], r"entry 0 \(sample-1:q999\): sample-1 has no question qa_index 999"),
])
def test_an_errata_file_that_does_not_fit_is_refused_naming_file_and_entry(tmp_path, entries, problem):
    path = errata_file(tmp_path, entries)
    with pytest.raises(DataError, match=rf"^{tmp_path}/errata.json: {problem}"):
        apply_errata(load_sample(), load_errata(path), path)


def test_a_missing_or_broken_file_is_one_clear_error(tmp_path):
    with pytest.raises(DataError, match="absent.json: no such file"):
        load_errata(tmp_path / "absent.json")
    (tmp_path / "broken.json").write_text("[{")
    with pytest.raises(DataError, match="broken.json: is not valid JSON"):
        load_errata(tmp_path / "broken.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)  # what the data loader refuses, too
    with pytest.raises(DataError, match="deep.json: cannot be parsed as JSON"):
        load_errata(tmp_path / "deep.json")


def test_an_entry_repeated_word_for_word_counts_once(tmp_path):
    path = errata_file(tmp_path, [ANSWER_FIX, CITATION_FIX, dict(ANSWER_FIX)])
    assert [c.question_id for c in load_errata(path)] == ["sample-1:q0", "sample-1:q1"]


def test_a_run_says_how_many_corrections_it_applied_and_warns_when_none(tmp_path, caplog):
    from memlab.eval.runner import select_conversations

    caplog.set_level("INFO")
    path = errata_file(tmp_path, [ANSWER_FIX, {**ANSWER_FIX, "conversation": "conv-99"}])
    select_conversations(None, None, None, path, None)
    assert f"{path}: 1 of 2 corrections applied (1 answers and 0 evidence lists changed), 1 for conversations " \
           "not loaded" in caplog.text
    elsewhere = errata_file(tmp_path, [{**ANSWER_FIX, "conversation": "conv-99"}])
    caplog.clear()
    select_conversations(None, None, None, elsewhere, None)
    assert [r.levelname for r in caplog.records if "corrections applied" in r.message] == ["WARNING"]


def test_a_run_scores_both_golds_and_judges_a_changed_answer_again(tmp_path):
    from memlab.eval.judge import CorrectWrongJudge

    path = errata_file(tmp_path, [ANSWER_FIX, CITATION_FIX])
    conversations, applied = apply_errata(load_sample(), load_errata(path), path)
    pipeline = FullContext(answerer=PromptedAnswerer(lm=ReplayLM(lambda r: "Organic chemistry")),
                           max_context_tokens=400)
    judged = []

    def verdict(request):  # CORRECT only against the audited gold of q0
        judged.append(request.messages[-1]["content"])
        return '{"label": "CORRECT"}' if "Organic chemistry" in request.messages[-1]["content"].split(
            "Generated answer")[0] else '{"label": "WRONG"}'

    metrics = run_benchmark(pipeline, conversations, tmp_path / "run", RunOptions(max_questions=3, progress=False),
                            judge=CorrectWrongJudge(lm=ReplayLM(verdict)), run_info={"errata": applied})
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(judged) == 3 + 1  # the changed answer is judged again; the citation fix reuses the verdict
    assert rows[0]["f1_amem"] < 1.0 and rows[0]["audited"]["f1_amem"] == 1.0
    assert rows[0]["judge"] == 0.0 and rows[0]["audited"]["judge"] == 1.0
    assert rows[1]["audited"]["judge"] == rows[1]["judge"] and rows[1]["audited"]["evidence"] == ["D2:8", "D2:9"]
    assert "audited" not in rows[2]
    assert metrics["errata"] == applied and metrics["audited"]["questions_corrected"] == 2
    assert metrics["audited"]["overall"]["n"] == metrics["overall"]["n"] == 3
    assert metrics["audited"]["overall"]["judge"] == pytest.approx(1 / 3)
    assert metrics["overall"]["judge"] == 0.0
    from memlab.reporting import write_report

    markdown = (write_report([tmp_path / "run"], tmp_path / "report").parent / "report.md").read_text()
    assert "| run | errata.json | 2 |" in markdown and "| 0.000 -> 0.333 |" in markdown  # judge, original -> audited


def test_memlab_run_takes_errata_from_the_flag_or_the_config(tmp_path):
    path = errata_file(tmp_path, [CITATION_FIX])
    rag = REPO / "configs" / "pipelines" / "rag_turns.yaml"
    options = RunOptions(retrieval_only=True, progress=False, max_questions=2)
    _, plain = run_config(rag, options=options, out=tmp_path / "plain")
    assert "audited" not in plain and plain["errata"] is None
    _, flagged = run_config(rag, options=options, out=tmp_path / "flag", errata=path)
    _, configured = run_config(rag, [f"eval.errata={path}"], options=options, out=tmp_path / "config")
    for metrics in (flagged, configured):
        assert metrics["audited"]["questions_corrected"] == 1 and metrics["errata"]["evidence_changed"] == 1
        assert metrics["audited"]["overall"]["f1_locomo"] is None  # retrieval only
    with pytest.raises(ValueError, match="eval.errata=.* must be null or the path of an errata file"):
        run_config(rag, ["eval.errata=3"], options=options, out=tmp_path / "bad")
