"""What a run records of the machine its timings come from."""

from __future__ import annotations

import json

import pytest

from memlab.eval.machine import cpu_description, machine_info
from memlab.eval.runner import run_config
from memlab.lm.llamacpp import LlamaCppLM
from memlab.lm.openai_compat import OpenAICompatLM
from tests.eval.test_run_door import QUIET, RAG
from tests.fakes import ReplayLM

CPUINFO = """processor\t: 0
model name\t: Example CPU @ 2.0GHz
flags\t\t: fpu sse2 avx avx2 fma f16c avx512f avx512_vnni

processor\t: 1
model name\t: Another CPU
flags\t\t: fpu
"""


def test_the_cpu_is_its_first_processors_model_and_speed_features():
    assert cpu_description(CPUINFO) == {"model": "Example CPU @ 2.0GHz",
                                        "features": ["avx2", "fma", "f16c", "avx512f", "avx512_vnni"]}
    assert cpu_description("")["features"] is None  # no flags known, not "none of them"


def test_each_lm_says_what_runs_it_and_a_fake_says_nothing():
    served = OpenAICompatLM(model="m", base_url="http://127.0.0.1:9/v1/", cache=None)
    info = machine_info([ReplayLM([]), served])
    assert info["cores"] >= 1 and info["python"] and info["torch"]
    assert info["lms"] == {repr(served): {"backend": "openai-compatible server", "base_url": "http://127.0.0.1:9/v1",
                                         "max_concurrency": 4}}


def test_llama_cpp_names_its_build_without_loading_a_model():
    pytest.importorskip("llama_cpp")
    runtime = LlamaCppLM(n_threads=2, cache=None).runtime()
    assert runtime["n_threads"] == 2 and runtime["llama_cpp_python"]
    assert "AVX" in runtime["built_for"] or "NEON" in runtime["built_for"]


def test_metrics_json_records_the_machine(tmp_path):
    folder, metrics = run_config(RAG, options=QUIET, out=tmp_path / "run")
    saved = json.loads((folder / "metrics.json").read_text())
    assert saved["machine"] == json.loads(json.dumps(metrics["machine"]))
    assert saved["machine"]["cpu"]["model"] and saved["machine"]["cores"] >= 1
