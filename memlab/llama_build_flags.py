"""The CMake flags to build llama.cpp (llama-cpp-python) with for the CPU this runs on.

    CMAKE_ARGS="$(python -m memlab.llama_build_flags)" pip install --no-cache-dir -e '.[local]'

Runs with the standard library only, before memlab or anything else is installed.

* Always the portable x86 set (AVX, AVX2, FMA, F16C, BMI2) with ``GGML_NATIVE`` off: the native
  build turns on Intel AMX where the CPU advertises it and then crashes in the AMX matrix kernel
  (seen on this project's Xeons with every model), so AMX is switched off by name as well.
* On a CPU whose flags line has the AVX-512 foundation llama.cpp's ``GGML_AVX512`` compiles for
  (F, CD, VL, DQ, BW), the AVX-512 kernels are added, and with them each extension the CPU has
  (VBMI, VNNI, BF16, and the VEX-coded AVX-VNNI): 1.46x faster prompts for the 1.5B model on a
  Xeon (BENCHMARKS.md, "Local LLM speed"). An extension the CPU lacks stays off, since a kernel
  compiled for it would stop the process with an illegal instruction.
* Without the AVX-512 foundation (or without ``/proc/cpuinfo``) the portable set is all: the
  wheel is then the one every x86-64 machine of this project runs.
* ``LLAVA_BUILD`` off: memlab never uses llama.cpp's multimodal library (35 s of the compile).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PORTABLE = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
            "-DGGML_BMI2=ON", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF",
            "-DLLAVA_BUILD=OFF")
#: What ``-DGGML_AVX512=ON`` compiles for (-mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw).
AVX512_FOUNDATION = frozenset({"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"})
#: Each extension's CMake option, by the /proc/cpuinfo flag that says the CPU has it.
AVX512_EXTENSIONS = (("avx512vbmi", "-DGGML_AVX512_VBMI=ON"), ("avx512_vnni", "-DGGML_AVX512_VNNI=ON"),
                     ("avx512_bf16", "-DGGML_AVX512_BF16=ON"), ("avx_vnni", "-DGGML_AVX_VNNI=ON"))


def cmake_flags(cpu_flags: set[str] | frozenset[str]) -> list[str]:
    """The CMake arguments for a CPU with these /proc/cpuinfo flags (module docstring)."""
    flags = list(PORTABLE)
    if AVX512_FOUNDATION <= cpu_flags:
        flags.append("-DGGML_AVX512=ON")
        flags += [option for flag, option in AVX512_EXTENSIONS if flag in cpu_flags]
    return flags


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The flags every processor of a /proc/cpuinfo text shares (none where it names none)."""
    lines = [line.split(":", 1)[1].split() for line in cpuinfo.splitlines()
             if line.split(":", 1)[0].strip() == "flags" and ":" in line]
    return frozenset.intersection(*map(frozenset, lines)) if lines else frozenset()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpuinfo", type=Path, default=None,
                        help="a /proc/cpuinfo text to read the CPU's flags from (default: this machine's)")
    args = parser.parse_args(argv)
    try:
        text = (args.cpuinfo or Path("/proc/cpuinfo")).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        if args.cpuinfo is not None:
            print(f"cannot read {args.cpuinfo}: {e.strerror or e}", file=sys.stderr)
            return 2
        text = ""  # not Linux: the portable set
    print(" ".join(cmake_flags(cpu_flags(text))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
