"""Precision of a hand-checked listing: JSON lines each with a ``label`` set by reading, "right" or
"wrong" (null: not checked). What a row is and when it is right is its listing's rule
(``memlab.pipelines.mnemis.inspection``: a closed fact, a category's child)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memlab.eval.intervals import wilson_interval

LABELS = ("right", "wrong")


def read_labelled(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a listing (OSError, ValueError: unreadable)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def precision(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``rows``, how many were checked, the right ones and their share with Wilson's 95% interval;
    a ValueError names a label other than ``LABELS``."""
    labelled = [row for row in rows if row.get("label") is not None]
    unknown = sorted({row["label"] for row in labelled} - set(LABELS))
    if unknown:
        raise ValueError(f"labels must be one of {list(LABELS)}; found {unknown}")
    right = sum(row["label"] == "right" for row in labelled)
    low, high = wilson_interval(right, len(labelled)) if labelled else (None, None)
    return {"rows": len(rows), "checked": len(labelled), "right": right,
            "precision": right / len(labelled) if labelled else None, "ci": [low, high]}


def write_listing(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """A listing to label; a FileExistsError when ``path`` exists, since labels are never overwritten."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists: labels are never overwritten")
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
