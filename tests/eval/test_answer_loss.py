"""memlab answer-loss: where a run's answer score is lost, per category."""

import json

import pytest

from memlab.cli import main
from memlab.eval import answer_loss


def _row(qid, category, f1, recall10=1.0, context=None):
    return {"question_id": qid, "category": category, "f1_amem": f1, "recall@10": recall10, "recall@context": context}


def test_the_loss_splits_disputed_then_missing_then_read():
    rows = [_row("c:q0", "temporal", 0.25),                 # disputed: the errata change its gold
            _row("c:q1", "temporal", 0.0, recall10=0.5),    # evidence missing (no recall@context: recall@10)
            _row("c:q2", "temporal", 0.5, recall10=0.5, context=1.0),  # recall@context wins over recall@10
            _row("c:q3", "single-hop", 1.0),
            _row("c:q4", "adversarial", 0.0)]               # not in categories 1-4
    table = answer_loss.loss_table(rows, {"c:q0"}, k=10, metric="f1_amem")
    temporal = table["temporal"]
    assert temporal["n"] == 3 and temporal["lost"] == pytest.approx(0.75 + 1.0 + 0.5)
    assert [temporal[b]["questions"] for b in answer_loss.BUCKETS] == [1, 1, 1]
    assert temporal["evidence missing"]["share"] == pytest.approx(1.0 / 2.25)
    assert table["overall"]["n"] == 4 and table["overall"]["f1_amem"] == pytest.approx(1.75 / 4)
    assert table["single-hop"]["lost"] == 0 and table["single-hop"]["evidence missing"]["share"] == 0.0


def test_the_command_reads_runs_and_the_errata(tmp_path, capsys, caplog):
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("\n".join(json.dumps(r) for r in
                                                     [_row("conv-26:q2", "open-domain", 0.0), _row("conv-26:q5", "single-hop", 0.5)]))
    errata = tmp_path / "errata.json"
    errata.write_text(json.dumps([{"conversation": "conv-26", "qa_index": 2, "question": "q?", "category": 3,
                                   "error_type": "HALLUCINATION", "golden_answer": "a", "correct_answer": "b",
                                   "correct_evidence": ["D1:1"]}]))
    assert main(["answer-loss", str(run), "--errata", str(errata), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["open-domain"]["gold disputed"]["questions"] == 1
    assert table["overall"]["evidence read, answer missed"]["lost"] == pytest.approx(0.5)
    assert main(["answer-loss", str(tmp_path / "missing")]) == 2 and "missing: no predictions.jsonl" in caplog.text


def test_the_read_bucket_counts_golds_that_are_spans_of_their_evidence():
    texts = {("c", "D1:1"): "I adopted a dog named Luna, in May.", ("c", "D1:2"): "We went hiking."}
    rows = [{**_row("c:q0", "single-hop", 0.25), "gold": "Luna", "evidence": ["D1:1"], "conversation_id": "c"},
            {**_row("c:q1", "single-hop", 0.0), "gold": "a dog", "evidence": ["D1:2", "D1:1"], "conversation_id": "c"},
            {**_row("c:q2", "single-hop", 0.0), "gold": "Lun", "evidence": ["D1:1"], "conversation_id": "c"},  # part of a word
            {**_row("c:q3", "single-hop", 0.0, context=0.5), "gold": "Luna", "evidence": ["D1:1"], "conversation_id": "c"},
            {**_row("d:q0", "single-hop", 0.0), "gold": "Luna", "evidence": ["D1:1"], "conversation_id": "d"}]  # other conversation
    table = answer_loss.loss_table(rows, set(), k=10, metric="f1_amem", turn_texts=texts)
    spans = table["single-hop"][answer_loss.SPAN]
    assert spans["questions"] == 2 and spans["lost"] == pytest.approx(0.75 + 1.0)  # q3's evidence was not all read
    assert spans["ceiling"] == pytest.approx((0.25 + 0.75 + 1.0) / 5)
    assert answer_loss.SPAN not in answer_loss.loss_table(rows, set(), k=10, metric="f1_amem")["single-hop"]
    assert answer_loss.SPAN in answer_loss.markdown(table, "f1_amem")
