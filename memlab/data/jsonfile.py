"""Reading JSON and JSON-lines files, with a ``DataError`` (not a traceback) when they are bad.

Every string read is passed through ``memlab.text.clean_text``: a lone surrogate from a
truncated emoji loads as valid JSON and only crashes the embedder's tokenizer much later.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memlab.data.errors import DataError
from memlab.text import clean_strings


def _read_text(path: Path) -> str:
    if not path.exists():
        raise DataError(path, "no such file or directory")
    if path.is_dir():
        raise DataError(path, "is a directory, expected a file")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(path, f"cannot be read ({exc})") from None


def read_json(path: str | Path) -> Any:
    """The parsed content of a JSON file."""
    path = Path(path)
    text = _read_text(path)
    try:
        return clean_strings(json.loads(text))
    except json.JSONDecodeError as exc:
        raise DataError(path, f"is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (RecursionError, ValueError) as exc:  # nesting too deep, a number too long to convert
        raise DataError(path, f"cannot be parsed as JSON ({type(exc).__name__}: {str(exc)[:100]})") from None


def read_jsonl(path: str | Path) -> list[Any]:
    """The parsed records of a JSON-lines file (blank lines are skipped)."""
    path = Path(path)
    records = []
    # "\n" only: splitlines() also breaks at U+2028 and \x1c-\x1e, which JSON strings may hold raw.
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            records.append(clean_strings(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DataError(path, f"line {number} is not valid JSON ({exc.msg})") from None
        except (RecursionError, ValueError) as exc:
            raise DataError(path, f"line {number} cannot be parsed as JSON ({type(exc).__name__}: {str(exc)[:100]})") \
                from None
    return records

