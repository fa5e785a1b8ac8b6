"""The line formats of CompassMem's search prompts (appendix F.2), both ways.

Writing: the one line a prompt shows for a node with a note after its key
(``N7 (causal) [7 May 2023] summary``, ``N3 (similarity 0.71) ...``) and the numbered
sub-goal list. Reading: the labelled fields a reply is asked for (``ACTION: ...``,
``Selected Nodes: [...]``, ``New Query: ...``), node keys and 1-based sub-goal numbers, as
leniently as a small model needs: markdown bold and headers around labels, labels in any case
with spaces or underscores, fields on one line or on several, brackets or none, ``NONE``.

Used by the select, navigate and refine stages; kept in one place so the three read replies
the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from memlab.stages.event_view import EventView


# -- writing ---------------------------------------------------------------------------------------
def describe_with(view: EventView, note: str) -> str:
    """``view.describe()`` with ``(note)`` after the key: ``N7 (causal) [7 May 2023] summary``."""
    rest = view.describe()[len(view.key):].lstrip()
    return f"{view.key} ({note}) {rest}".rstrip()


def subgoals_text(subgoals: Sequence[str], satisfied: Sequence[bool] | None = None) -> str:
    """The sub-goal block of the selection and action prompts (the paper fills ``{subgoals_text}``
    without printing its form; this rendering is memlab's)::

        SUB-GOALS:
        1. Where did Ann travel? [SATISFIED]
        2. When did she go?

    Empty when there are no sub-goals."""
    if not subgoals:
        return ""
    flags = satisfied if satisfied is not None else [False] * len(subgoals)
    lines = [f"{i}. {goal}{' [SATISFIED]' if done else ''}" for i, (goal, done) in enumerate(zip(subgoals, flags), 1)]
    return "SUB-GOALS:\n" + "\n".join(lines)


def numbered(subgoals: Iterable[tuple[int, str]], empty: str = "(none)") -> str:
    """``(index, text)`` pairs (0-based) as ``1. text`` lines, keeping each sub-goal's own number."""
    return "\n".join(f"{i + 1}. {goal}" for i, goal in subgoals) or empty


# -- reading ---------------------------------------------------------------------------------------
def label_pattern(*names: str) -> str:
    """A regex alternative for a label written as in the prompt, in any case, with spaces,
    underscores or hyphens between its words (``NEXT_NODES``, ``Next nodes``, ``next-nodes``)."""
    def one(name: str) -> str:
        return r"[\s_-]*".join(re.escape(word) for word in re.split(r"[\s_-]+", name.strip()))
    return "|".join(one(name) for name in names)


def field_reader(labels: Mapping[str, str]) -> re.Pattern[str]:
    """One regex finding every label of ``labels`` (field name -> ``label_pattern``): a label
    not glued to a preceding letter, markdown around it allowed (``**ACTION:**``,
    ``**ACTION**:``, ``### Action:``), then a colon."""
    groups = "|".join(f"(?P<{name}>{pattern})" for name, pattern in labels.items())
    return re.compile(rf"(?<![A-Za-z])(?:{groups})[ \t*_]*:[ \t*]*", re.IGNORECASE)


def read_fields(text: str, reader: re.Pattern[str]) -> dict[str, list[str]]:
    """Every value of each field found, in order. A value ends at the next label (of any field,
    so fields written on one line split) and at the end of its line, so chatter on the lines
    after it is not read as part of it; a label alone on its line takes the lines after it up to
    a blank line (``Selected Nodes:`` then ``- N1`` ``- N3``), and an unclosed ``[`` runs on
    to its ``]``."""
    matches = list(reader.finditer(text))
    fields: dict[str, list[str]] = {}
    for match, after in zip(matches, matches[1:] + [None]):
        value = _block(text[match.end(): after.start() if after is not None else len(text)])
        fields.setdefault(str(match.lastgroup), []).append(value)
    return fields


def _block(value: str) -> str:
    lines = value.split("\n")
    head = lines[0].strip()
    if head and not ("[" in head and "]" not in head):
        return head
    taken: list[str] = []
    for line in lines:
        line = line.strip()
        if line:
            taken.append(line)
            if head and "]" in line:
                break
        elif taken and not head:
            break
    return "\n".join(taken)


def first(values: list[str] | None) -> str | None:
    """The first value that is not blank (a label written twice, once bare: ``Here is the new
    query:`` then ``New Query: ...``); None when the field is absent or always blank."""
    return next((value for value in values or () if value), None)


_DECORATION = " \t\r\n*`_#\"'"


def clean_value(value: str) -> str:
    """A field's text without markdown and quotes around it nor the brackets of the prompt's
    ``[...]`` placeholder, whitespace collapsed (brackets inside the text are kept)."""
    value = value.strip(_DECORATION)
    if value.startswith("[") and (value.endswith("]") or "]" not in value):
        value = value[1:-1] if value.endswith("]") else value[1:]
    return " ".join(value.strip(_DECORATION).split())


_EMPTY_LIST = re.compile(r"\[\s*\]|\(\s*\)")
_NONE = re.compile(r"(?:none|n/a|null|nothing|no\s+(?:nodes?|neighbou?rs?|sub[\s_-]*goals?))\b", re.IGNORECASE)


def says_none(value: str) -> bool:
    """The field states an empty list: ``NONE``, ``[]``, ``[NONE]``, ``No nodes`` ..."""
    value = value.strip().strip("*`").strip()
    return _EMPTY_LIST.match(value) is not None or _NONE.match(value.lstrip("[(*` ")) is not None


# A run of letters (maybe none) and digits standing alone: ``N12``, ``n 12``, ``Node12``, ``12``;
# not part of a longer word (``NODE_ID1``, ``N7s``) nor of a decimal (``0.71``).
_KEY = re.compile(r"(?<![\w.])([A-Za-z]*)([ _-]?)(\d{1,9})(?![\w]|\.\d)")
#: Words before a number that make it a node's (``node 12``); "" is a bare number.
_NUMBER_WORDS = frozenset({"", "node", "nodes", "id", "event"})


def node_keys(text: str, keys: Iterable[str], bare: bool = True) -> list[str]:
    """The node keys ``text`` names, in order (repeats kept; callers cut to their contract).

    A token with a known key's letters (``N12``, ``n12``, ``N 12``, ``[N12]``) is a key: the
    known one, else as written (unknown keys are dropped by the callers). A number after
    ``node`` (``node 12``) is the key whose number it is, when exactly one known key has that
    number; so is a bare number (``12``), but only when no key was named at all: a reply that
    names ``N3`` may echo its date (``[7 May 2023]``), whose numbers are not node ids.
    ``bare=False`` reads no bare number (free text, where numbers are rarely node ids).
    """
    known = {key.casefold(): key for key in keys}
    prefixes = {m.group(1).casefold() for m in (_KEY.fullmatch(key) for key in known) if m}
    by_number: dict[int, list[str]] = {}
    for folded, key in known.items():
        m = _KEY.fullmatch(folded)
        if m:
            by_number.setdefault(int(m.group(3)), []).append(key)
    named: list[str] = []
    bare_keys: list[str] = []
    for m in _KEY.finditer(text):
        prefix, digits = m.group(1).casefold(), m.group(3)
        if prefix and prefix in prefixes:
            named.append(known.get(f"{prefix}{digits}", f"{m.group(1)}{digits}"))
            continue
        if prefix not in _NUMBER_WORDS and m.group(2) == " ":
            prefix = ""  # a word, then a number of its own ("and 3")
        if prefix in _NUMBER_WORDS:
            owners = by_number.get(int(digits), [])
            if len(owners) == 1:
                (named if prefix else bare_keys).append(owners[0])
    return named or (bare_keys if bare else [])


_NUMBER = re.compile(r"(?<![\w.])(\d{1,3})(?![\w]|\.\d)")


def subgoal_indices(text: str) -> list[int]:
    """The sub-goal numbers ``text`` names (``[1, 3]``, ``1 and 3``, ``Sub-goal 2``), 0-based,
    in order; out-of-range ones are the callers' to drop."""
    return [int(m.group(1)) - 1 for m in _NUMBER.finditer(text)]
