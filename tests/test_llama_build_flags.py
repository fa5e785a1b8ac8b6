"""The llama.cpp build flags chosen at install (``memlab.llama_build_flags``): fed /proc/cpuinfo
texts, and checked against the llama.cpp this machine has installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.llama_build_flags import PORTABLE, cmake_flags, cpu_flags, main

REPO = Path(__file__).resolve().parents[1]
#: The flags README command 1 gave every CPU before the choice was made at install.
BEFORE = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
          "-DLLAVA_BUILD=OFF").split()
ZEN3 = "fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand avx2 bmi1 bmi2 sha_ni vaes"
ZEN4 = (ZEN3 + " avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vbmi2 "
        "avx512_vnni avx512_bitalg avx512_vpopcntdq")
SAPPHIRE_RAPIDS = ZEN4 + " avx_vnni avx512_fp16 amx_bf16 amx_tile amx_int8"


def _cpuinfo(*flag_lines: str) -> str:
    return "\n\n".join(f"processor\t: {i}\nmodel name\t: Some CPU\nflags\t\t: {line}"
                       for i, line in enumerate(flag_lines)) + "\n"


def test_without_avx512_the_flags_build_the_same_wheel_as_before():
    flags = cmake_flags(cpu_flags(_cpuinfo(ZEN3, ZEN3)))
    assert flags == list(PORTABLE)
    # the only additions switch off AMX by name, which llama.cpp's CMake leaves off already
    assert set(flags) - set(BEFORE) == {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"}
    assert set(BEFORE) <= set(flags)


def test_avx512_adds_the_kernels_and_only_the_extensions_the_cpu_has():
    zen4 = cmake_flags(cpu_flags(_cpuinfo(ZEN4)))
    assert zen4[:len(PORTABLE)] == list(PORTABLE)
    assert zen4[len(PORTABLE):] == ["-DGGML_AVX512=ON", "-DGGML_AVX512_VBMI=ON", "-DGGML_AVX512_VNNI=ON",
                                    "-DGGML_AVX512_BF16=ON"]  # no AVX-VNNI: Zen 4 lacks it
    sapphire = cmake_flags(cpu_flags(_cpuinfo(SAPPHIRE_RAPIDS)))
    assert sapphire[len(PORTABLE):] == zen4[len(PORTABLE):] + ["-DGGML_AVX_VNNI=ON"]
    assert not any("AMX" in flag and flag.endswith("=ON") for flag in sapphire) and "-DGGML_NATIVE=OFF" in sapphire


def test_a_partial_avx512_foundation_or_a_mixed_machine_gets_the_portable_set():
    no_vl = ZEN4.replace(" avx512vl", "")
    assert cmake_flags(cpu_flags(_cpuinfo(no_vl))) == list(PORTABLE)
    assert cmake_flags(cpu_flags(_cpuinfo(ZEN4, ZEN3))) == list(PORTABLE)  # every processor must have it
    assert cmake_flags(cpu_flags("")) == list(PORTABLE)  # no /proc/cpuinfo: not Linux


def test_the_command_reads_a_given_text_and_refuses_a_missing_one(tmp_path, capsys):
    (tmp_path / "cpuinfo").write_text(_cpuinfo(ZEN4))
    assert main(["--cpuinfo", str(tmp_path / "cpuinfo")]) == 0
    assert capsys.readouterr().out.split() == cmake_flags(cpu_flags(_cpuinfo(ZEN4)))
    assert main(["--cpuinfo", str(tmp_path / "nope")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_it_runs_before_anything_is_installed():
    """README command 1 calls it before pip installs memlab or its dependencies: the standard
    library only, run from the checkout with no site-packages."""
    done = subprocess.run([sys.executable, "-S", "-m", "memlab.llama_build_flags"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:len(PORTABLE)] == list(PORTABLE)


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")
def test_the_installed_llama_cpp_has_the_kernels_chosen_for_this_cpu():
    """An install by the README's commands builds AVX-512 kernels where this CPU has them, and never AMX."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    path = Path("/proc/cpuinfo")
    chosen = cmake_flags(cpu_flags(path.read_text(errors="replace") if path.exists() else ""))
    assert "AMX" not in info.replace("AMX_INT8 = 0", "")
    assert ("AVX512 = 1" in info) == ("-DGGML_AVX512=ON" in chosen), \
        f"llama.cpp reports {info!r} but this CPU's flags are {chosen}: reinstall it by README command 1"
