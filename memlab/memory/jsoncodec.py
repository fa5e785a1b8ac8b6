"""JSON encoding of memory contents: units, node attributes, timestamps.

Timestamps (``MemoryUnit.timestamp``, graph node timestamps) are written as ISO-8601 strings.
Free-form ``attributes`` keep their values: JSON types as they are, a ``datetime`` inside
attributes as ``{"$datetime": iso}`` (so it comes back as a datetime, not a string), numpy
scalars and arrays as numbers and lists, tuples and sets as lists. Anything else is refused
with a ``TypeError`` that names where it was found.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import numpy as np

from memlab.types import MemoryUnit

_DATETIME = "$datetime"
_DATE = "$date"


def encode_value(value: Any, where: str = "value") -> Any:
    """A JSON-serialisable form of ``value`` (see the module docstring)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, datetime):
        return {_DATETIME: value.isoformat()}
    if isinstance(value, date):
        return {_DATE: value.isoformat()}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: dict keys must be str, got {key!r}")
            out[key] = encode_value(item, f"{where}.{key}")
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [encode_value(item, f"{where}[{i}]") for i, item in enumerate(items)]
    raise TypeError(f"{where}: {type(value).__name__} is not JSON-serialisable")


def decode_value(value: Any) -> Any:
    """Inverse of ``encode_value`` (lists stay lists)."""
    if isinstance(value, dict):
        if len(value) == 1 and _DATETIME in value:
            return datetime.fromisoformat(value[_DATETIME])
        if len(value) == 1 and _DATE in value:
            return date.fromisoformat(value[_DATE])
        return {key: decode_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode_value(item) for item in value]
    return value


def encode_time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def decode_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def unit_to_dict(unit: MemoryUnit) -> dict[str, Any]:
    return {
        "id": unit.id,
        "text": unit.text,
        "source_ids": list(unit.source_ids),
        "timestamp": encode_time(unit.timestamp),
        "kind": unit.kind,
        "speaker": unit.speaker,
        "attributes": encode_value(unit.attributes, f"unit {unit.id!r} attributes"),
    }


def unit_from_dict(data: dict[str, Any]) -> MemoryUnit:
    return MemoryUnit(
        id=data["id"],
        text=data["text"],
        source_ids=tuple(data["source_ids"]),
        timestamp=decode_time(data.get("timestamp")),
        kind=data.get("kind", "turn"),
        speaker=data.get("speaker"),
        attributes=decode_value(data.get("attributes") or {}),
    )
