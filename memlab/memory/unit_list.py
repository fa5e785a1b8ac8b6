"""A saved list of memory units with no index (a full-context pipeline's memory: its turns in order).

``save_units(dir, units)`` writes ``units.jsonl`` and ``manifest.json`` (format
``memlab.UnitList``) through ``memlab.fileio.atomic_folder``, as ``UnitMemory.save`` does;
``load_units(dir)`` checks the manifest (format, version, checksums) before reading and raises
``MemoryStoreError`` naming the folder and the problem.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from memlab import fileio
from memlab.fileio import atomic_folder
from memlab.memory.jsoncodec import unit_from_dict, unit_to_dict
from memlab.memory.store import (
    RECORDED_PACKAGES,
    UNITS_FILE,
    MemoryStoreError,
    _check_replaceable,
    _read_jsonl,
    _write_jsonl,
    read_manifest,
)
from memlab.types import MemoryUnit
from memlab.versions import package_versions

FORMAT = "memlab.UnitList"
FORMAT_VERSION = 1


def save_units(folder: str | os.PathLike, units: Sequence[MemoryUnit]) -> Path:
    folder = Path(folder)
    _check_replaceable(folder)
    with atomic_folder(folder) as tmp:
        _write_jsonl(tmp / UNITS_FILE, (unit_to_dict(u) for u in units))
        fileio.write_manifest(tmp, FORMAT, FORMAT_VERSION, package_versions(RECORDED_PACKAGES),
                              counts={"units": len(units)})
    return folder


def load_units(folder: str | os.PathLike) -> list[MemoryUnit]:
    folder = Path(folder)
    manifest = read_manifest(folder, FORMAT, FORMAT_VERSION, required=(UNITS_FILE,))
    try:
        units = [unit_from_dict(row) for row in _read_jsonl(folder / UNITS_FILE)]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise MemoryStoreError(f"{folder}: cannot read {UNITS_FILE}: {type(e).__name__}: {e}") from None
    if len(units) != manifest["counts"]["units"]:
        raise MemoryStoreError(f"{folder}: {len(units)} units, the manifest says {manifest['counts']['units']}")
    return units
