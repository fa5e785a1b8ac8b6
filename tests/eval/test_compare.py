from pathlib import Path

import pytest

from tests.eval_scripts import eval_script

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_compare_runs_each_config_once_and_writes_a_table(tmp_path, capsys):
    compare = eval_script("compare")
    config = str(REPO / "configs/pipelines/rag_turns.yaml")
    args = [config, "--out", str(tmp_path), "--retrieval-only", "--max-questions", "3", "--set", "top_k=3"]
    assert compare.main(args) == 0
    table = (tmp_path / "table.md").read_text()
    assert table.splitlines()[2].startswith("| rag_turns | ")
    first = (tmp_path / "rag_turns" / "metrics.json").stat().st_mtime_ns
    assert compare.main(args) == 0  # resumed: the finished config is not run again
    assert (tmp_path / "rag_turns" / "metrics.json").stat().st_mtime_ns == first


def test_category_table_lists_locomo_categories_in_order():
    compare = eval_script("compare")
    results = {"a": {"by_category": {"single-hop": {"f1_amem": 0.5}, "temporal": {"f1_amem": 0.25},
                                     "adversarial": {"f1_amem": None}}}}
    lines = compare.category_table(results).splitlines()
    assert lines[0] == "| f1_amem by category | temporal | single-hop | adversarial |"
    assert lines[2] == "| a | 0.250 | 0.500 | - |"


@pytest.mark.slow
def test_a_sweep_over_shared_workers_writes_each_config_as_its_sequential_run(tmp_path):
    import json

    compare = eval_script("compare")
    configs = [str(REPO / "configs/pipelines/rag_turns.yaml"), str(REPO / "configs/pipelines/rag.yaml")]
    common = ["--retrieval-only", "--max-questions", "4"]
    assert compare.main(configs + ["--out", str(tmp_path / "parallel"), "--workers", "2"] + common) == 0
    assert compare.main(configs + ["--out", str(tmp_path / "sequential")] + common) == 0

    def rankings(folder):
        lines = (folder / "predictions.jsonl").read_text().splitlines()
        return [(row["question_id"], row["retrieved"]) for row in map(json.loads, lines)]

    for name in ("rag_turns", "rag"):
        assert json.loads((tmp_path / "parallel" / name / "metrics.json").read_text())["workers"] == 2
        assert rankings(tmp_path / "parallel" / name) == rankings(tmp_path / "sequential" / name)
