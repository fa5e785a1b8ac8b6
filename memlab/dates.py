"""How memlab writes a date in text: one rendering for every prompt, header and annotation.

``format_day`` gives "7 May 2023": day without a leading zero, English month name, year. It
is independent of the process locale (``strftime``'s ``%B`` is not), it is the form LoCoMo's
gold answers use, and the form MAGMA's answer prompt asks for ("'D Month YYYY'", appendix C.2).
"""

from __future__ import annotations

from datetime import date

MONTH_NAMES: tuple[str, ...] = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)
WEEKDAY_NAMES: tuple[str, ...] = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def format_day(day: date) -> str:
    """``7 May 2023`` (a ``datetime`` is rendered by its date)."""
    return f"{day.day} {MONTH_NAMES[day.month - 1]} {day.year}"
