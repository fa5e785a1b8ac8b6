"""One date rendering for every prompt (memlab.dates)."""

from __future__ import annotations

import re
from datetime import date, datetime
from pathlib import Path

from memlab.dates import format_day


def test_format_day_has_no_leading_zero_and_english_month():
    assert format_day(date(2023, 5, 7)) == "7 May 2023"
    assert format_day(datetime(2022, 12, 25, 18, 30)) == "25 December 2022"


def test_no_module_renders_dates_with_strftime_names():
    # %B / %b / %A follow the process locale; data loaders may *parse* with them, nothing renders with them.
    root = Path(__file__).resolve().parents[1] / "memlab"
    renders = [f"{path.relative_to(root)}:{n}" for path in root.rglob("*.py") if path.parent.name != "data"
               for n, line in enumerate(path.read_text().splitlines(), 1)
               if re.search(r"%[BbAa]\b", line) and "strptime" not in line and not line.lstrip().startswith(("#", '"', "'"))
               and "``" not in line]
    assert renders == []
