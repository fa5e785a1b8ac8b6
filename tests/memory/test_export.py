"""memlab export-memory: a saved memory as GraphML, JSON lines and an HTML view, checked in a real headless browser."""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime

import networkx as nx
import numpy as np
import pytest

from memlab.cli import main
from memlab.memory.export import read_saved_graph, write_jsonl
from memlab.memory.graph import MemoryGraph
from memlab.memory.store import MemoryStoreError, UnitMemory
from memlab.memory.viewer import write_viewer
from memlab.types import MemoryUnit
from tests.fakes import ReplayLM
from tests.memory.helpers import HashingEmbedder
from tests.memory.webdriver import HeadlessChromium
from tests.pipelines import test_magma


@pytest.fixture(scope="module")
def magma_folder(tmp_path_factory):
    pipeline = test_magma.make(ReplayLM(test_magma.scripted))
    memory = pipeline.build(test_magma.conversation().history())
    folder = tmp_path_factory.mktemp("saved") / "magma"
    pipeline.save_memory(memory, folder)
    return folder, memory


def test_a_saved_graph_memory_exports_with_types_times_and_source_turns(magma_folder, tmp_path):
    folder, memory = magma_folder
    graph = read_saved_graph(folder)
    assert graph.to_dict()["edges"] == memory.graph.to_dict()["edges"]
    graph.to_graphml(tmp_path / "m.graphml")
    read = nx.read_graphml(tmp_path / "m.graphml")
    event = memory.graph.nodes("event")[0]
    assert read.nodes[event]["type"] == "event"
    assert json.loads(read.nodes[event]["provenance"]) == list(memory.graph.provenance(event))
    assert {d["type"] for _, _, d in read.edges(data=True)} == {t for _, _, d in memory.graph.edges() for t in [d["type"]]}
    lines = [json.loads(line) for line in write_jsonl(graph, tmp_path / "m.jsonl").read_text().splitlines()]
    assert sum(line["kind"] == "node" for line in lines) == len(graph.nodes())
    assert sum(line["kind"] == "edge" for line in lines) == len(graph.edges())
    assert all("embedding" not in line for line in lines)


def test_units_without_a_graph_become_nodes_and_corruption_is_refused(tmp_path):
    memory = UnitMemory(HashingEmbedder())
    memory.add([MemoryUnit(f"u{i}", f"turn {i}", (f"D1:{i}",), datetime(2023, 5, 1), "turn", "Ann") for i in range(3)])
    memory.save(tmp_path / "units")
    graph = read_saved_graph(tmp_path / "units")
    assert graph.nodes("turn") == ["u0", "u1", "u2"] and graph.provenance("u1") == ("D1:1",)
    (tmp_path / "units" / "units.jsonl").write_text("{}")
    with pytest.raises(MemoryStoreError, match="corrupted or truncated"):
        read_saved_graph(tmp_path / "units")
    with pytest.raises(MemoryStoreError, match="not a saved memory"):
        read_saved_graph(tmp_path)


def test_cli_exports_a_folder_of_saved_memories(magma_folder, tmp_path, capsys):
    folder, _ = magma_folder
    memories = tmp_path / "memories"
    shutil.copytree(folder, memories / "conv-x")
    (memories / "memories.json").write_text(json.dumps({
        "format": "memlab.SavedMemories", "format_version": 1, "build_config": {},
        "memories": {"conv-x": {"folder": "conv-x", "history_sha256": "0", "saved": "now"}}}))
    for fmt in ("graphml", "jsonl", "html"):
        assert main(["export-memory", str(memories), "--format", fmt]) == 0
        assert (tmp_path / f"memories-{fmt}" / f"conv-x.{fmt}").stat().st_size > 0
    assert main(["export-memory", str(memories / "conv-x"), "--format", "html", "--out", str(tmp_path / "v.html")]) == 0
    assert main(["export-memory", str(tmp_path), "--format", "html"]) == 2


# -- the HTML view in a real browser ---------------------------------------------------------
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def _browser() -> HeadlessChromium:
    if not (CHROMIUM and CHROMEDRIVER):
        if os.environ.get("CI"):
            pytest.fail("CI must have chromium and chromedriver (apt-get install chromium chromium-driver)")
        pytest.skip("needs chromium and chromedriver (apt-get install chromium chromium-driver)")
    return HeadlessChromium(CHROMIUM, CHROMEDRIVER)


def _small_graph() -> MemoryGraph:
    graph = MemoryGraph()
    graph.add_node("e1", "event", text="Ann adopted a puppy named Rex.", timestamp=datetime(2023, 5, 7),
                   provenance=("D1:3",))
    graph.add_node("e2", "event", text="Rex chewed every shoe </script> in the house.", provenance=("D2:1", "D2:2"))
    graph.add_node("ann", "entity", text="Ann")
    graph.add_edge("e1", "e2", "causal", label="leads to")
    graph.add_edge("ann", "e1", "entity")
    return graph


def test_the_viewer_draws_every_node_and_a_click_shows_its_text(tmp_path):
    page = write_viewer(_small_graph(), tmp_path / "view.html", "toy memory")
    with _browser() as browser:
        browser.get(page.as_uri())
        assert browser.find("body").attribute("data-ready") == "true"
        circles = browser.find_all("circle.node")
        assert sorted(c.attribute("data-id") for c in circles) == ["ann", "e1", "e2"]
        assert len(browser.find_all("line.edge")) == 2
        next(c for c in circles if c.attribute("data-id") == "e2").click()
        assert browser.find("#node-text").text == "Rex chewed every shoe </script> in the house."
        details = browser.find("#details").text
        assert "D2:1, D2:2" in details and "causal (leads to)" in details
        browser.find("#search").send_keys("puppy")
        assert browser.find("#hits").text == "1 matching nodes"
        assert [c.attribute("data-id") for c in browser.find_all("circle.hit")] == ["e1"]
        shot = browser.screenshot()
        browser.get(page.as_uri() + "#node=ann")  # a link to one node opens with it shown
        assert browser.find("#node-text").text == "Ann"
    (tmp_path / "view.png").write_bytes(shot)
    import matplotlib.image

    pixels = matplotlib.image.imread(tmp_path / "view.png")
    assert pixels.shape[0] > 400 and pixels.shape[1] > 800
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 20  # drawn, not a blank page
