from pathlib import Path

import pytest

from memlab.cli import main
from memlab.eval.compare import category_table

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_compare_runs_each_config_once_and_writes_a_table(tmp_path, capsys):
    config = str(REPO / "configs/pipelines/rag_turns.yaml")
    args = ["compare", config, "--out", str(tmp_path), "--retrieval-only", "--max-questions", "3", "--set", "top_k=3"]
    assert main(args) == 0
    table = (tmp_path / "table.md").read_text()
    assert table.splitlines()[2].startswith("| rag_turns | ")
    first = (tmp_path / "rag_turns" / "metrics.json").stat().st_mtime_ns
    assert main(args) == 0  # resumed: the finished config is not run again
    assert (tmp_path / "rag_turns" / "metrics.json").stat().st_mtime_ns == first


def test_category_table_lists_locomo_categories_in_order():
    results = {"a": {"by_category": {"single-hop": {"f1_amem": 0.5}, "temporal": {"f1_amem": 0.25},
                                     "adversarial": {"f1_amem": None}}}}
    lines = category_table(results).splitlines()
    assert lines[0] == "| f1_amem by category | temporal | single-hop | adversarial |"
    assert lines[2] == "| a | 0.250 | 0.500 | - |"


@pytest.mark.slow
def test_a_sweep_over_shared_workers_writes_each_config_as_its_sequential_run(tmp_path):
    import json

    configs = [str(REPO / "configs/pipelines/rag_turns.yaml"), str(REPO / "configs/pipelines/rag.yaml")]
    common = ["--retrieval-only", "--max-questions", "4"]
    assert main(["compare", *configs, "--out", str(tmp_path / "parallel"), "--workers", "2", *common]) == 0
    assert main(["compare", *configs, "--out", str(tmp_path / "sequential"), *common]) == 0

    def rankings(folder):
        lines = (folder / "predictions.jsonl").read_text().splitlines()
        return [(row["question_id"], row["retrieved"]) for row in map(json.loads, lines)]

    for name in ("rag_turns", "rag"):
        assert json.loads((tmp_path / "parallel" / name / "metrics.json").read_text())["workers"] == 2
        assert rankings(tmp_path / "parallel" / name) == rankings(tmp_path / "sequential" / name)


def test_a_config_that_fails_does_not_stop_the_others_but_fails_the_command(tmp_path, caplog):
    good = str(REPO / "configs/pipelines/rag_turns.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("_component_: memlab.pipelines.rag.RAG\nno_such_key: 1\n")
    assert main(["compare", str(bad), good, "--out", str(tmp_path / "out"), "--retrieval-only",
                 "--max-questions", "2"]) == 1
    assert "bad: " in caplog.text and "continuing with the others" in caplog.text
    assert (tmp_path / "out" / "rag_turns" / "metrics.json").is_file()
