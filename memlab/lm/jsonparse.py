"""Structured output from LLM text: find the JSON, repair what is safely repairable, validate.

``parse_json(text, schema=None)`` is the one parser every prompted stage uses. In order:

1. ``<think>...</think>`` blocks are dropped (and everything before a lone ``</think>``,
   which chat templates that open the block themselves leave behind); a reply that ends
   inside a block, with nothing before it, has no answer (``ParseError``).
2. Candidates are the contents of each fenced code block, then the whole text; in each,
   every ``{`` / ``[`` (only the one the schema's top-level type allows) is a start.
3. A candidate is read by strict ``json.loads`` first; failing that, by a tolerant reader
   that accepts trailing commas, ``//`` and ``/* */`` comments, Python's ``True`` /
   ``False`` / ``None``, single-quoted strings, raw newlines in strings, and text after the
   value. In a string value, a quote that is not followed by ``, : } ]`` (or the end) is
   kept as a character: an apostrophe in a single-quoted string, an unescaped inner quote
   in a double-quoted one; if the string then never closes, the first such quote was the
   closing one after all. Truncated output is closed: an unfinished array element is
   dropped (only complete items are kept), an unfinished object member keeps its value
   when it is a string, number or container, and the open brackets are closed.
4. The first candidate that parses (and validates against ``schema``, via ``jsonschema``)
   wins; a nested value can win when its container does not validate (models sometimes
   wrap the answer in an extra object). Otherwise ``ParseError`` says what was wrong: no JSON found, a syntax error, or
   the schema violation of the best candidate.

Unquoted keys, missing commas and similar guesses are not repaired: they are ambiguous,
and a stage's corrective retry is the better fix. Nor is what JSON allows but no reply means:
a key given twice with different values (which did the model mean? ``AmbiguousReplyError``, at
once, whatever else the text holds), ``NaN`` and ``Infinity``, numbers longer than
``_MAX_NUMBER_CHARS`` characters or too large for a float, nesting deeper than ``_MAX_DEPTH``.
Strings in the value are cleaned (``clean_text``: a ``\\ud83d`` escape is a lone surrogate).

Every way a completion can fail, however odd, is a ``ParseError``, never another exception,
and the work is linear in the completion's length (at most ``_MAX_STARTS`` readings of it).
A runaway reply (longer than ``MAX_REPLY_CHARS``, or an array of more than ``MAX_ITEMS`` items)
is an ``OversizedReplyError`` at once, before validation or any further reading.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Any

from memlab.lm.errors import AmbiguousReplyError, OversizedReplyError, ParseError
from memlab.text import TooDeep, clean_strings, clean_text

_MAX_STARTS = 32  # start positions tried per candidate; bounds the work on long prose
#: Deeper JSON is no answer to any prompt; bounding it keeps recursion (ours, ``json``'s and
#: ``jsonschema``'s) far from Python's limit.
_MAX_DEPTH = 32
#: The most items one array of a reply may hold. Every request schema asks for far fewer; a reply
#: with more is refused before schema validation, whose cost grows with the items (seconds for
#: 100,000), so a runaway reply costs milliseconds.
MAX_ITEMS = 1_000
#: The longest completion read as JSON. Decoding costs about a second per 5 MB; no prompt asks
#: for a tenth of this, so a longer reply is a runaway one, refused unread.
MAX_REPLY_CHARS = 2_000_000
#: Longer numbers are noise (and ``int()`` refuses over 4,300 digits with a ``ValueError``).
_MAX_NUMBER_CHARS = 64
_OPEN_THINK, _CLOSE_THINK = "<think>", "</think>"
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_LITERALS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
# After a closing quote, the next non-space character is one of these (or the text ends).
_AFTER_STRING = frozenset(",:}]")
# Runs of characters a string copies as they are, read in one step (a long string in C time).
_PLAIN = {'"': re.compile(r'[^"\\]+'), "'": re.compile(r"[^'\\]+")}


class _Missing:
    """Marker for a value cut off before anything usable was read."""


_MISSING = _Missing()


class _Syntax(Exception):
    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} at character {pos}")


class _Reader:
    """Tolerant JSON reader; ``read(start)`` returns (value, end, complete)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.n = len(text)
        self.depth = 0

    def skip(self, i: int) -> int:
        text, n = self.text, self.n
        while i < n:
            c = text[i]
            if c in " \t\r\n":
                i += 1
            elif text.startswith("//", i):
                j = text.find("\n", i)
                i = n if j < 0 else j + 1
            elif text.startswith("/*", i):
                j = text.find("*/", i + 2)
                i = n if j < 0 else j + 2
            else:
                break
        return i

    def value(self, i: int) -> tuple[Any, int, bool]:
        i = self.skip(i)
        if i >= self.n:
            return _MISSING, i, False
        c = self.text[i]
        if c in "{[":
            if self.depth >= _MAX_DEPTH:
                raise _Syntax(f"nested deeper than {_MAX_DEPTH} levels", i)
            self.depth += 1
            try:
                return self.object(i + 1) if c == "{" else self.array(i + 1)
            finally:
                self.depth -= 1
        if c in "\"'":
            return self.string(i)
        if c == "-" or c.isdigit():
            return self.number(i)
        for word, literal in _LITERALS.items():
            if self.text.startswith(word, i):
                return literal, i + len(word), True
            if word.startswith(self.text[i:]):  # cut off inside the word
                return _MISSING, self.n, False
        raise _Syntax(f"unexpected character {c!r}", i)

    def number(self, i: int) -> tuple[Any, int, bool]:
        match = _NUMBER.match(self.text, i)
        if match is None:
            if self.text[i:].strip() in ("-", ""):
                return _MISSING, self.n, False
            raise _Syntax("malformed number", i)
        end = match.end()
        if end < self.n and self.text[end] in ".eE":  # "1." / "1e" at the cut
            if self.skip(end + 1) >= self.n or self.text[end + 1 :].lstrip("+-").strip() == "":
                return _MISSING, self.n, False
            raise _Syntax("malformed number", i)
        token = match.group()
        value = _number(token)
        if value is None:
            raise _Syntax(f"number {_preview(token, 20)} is too long or too large", i)
        # A number that runs into the end of the text may have been cut ("12" of "125").
        return value, end, end < self.n

    def closes_string(self, j: int) -> bool:
        k = self.skip(j + 1)
        return k >= self.n or self.text[k] in _AFTER_STRING

    def string(self, i: int, key: bool = False) -> tuple[Any, int, bool]:
        quote = self.text[i]
        text, n = self.text, self.n
        out: list[str] = []
        first_skipped: tuple[int, int] | None = None  # (text position, length of out) of a kept quote
        plain = _PLAIN[quote]
        j = i + 1
        while j < n:
            run = plain.match(text, j)
            if run is not None:
                out.append(run.group())
                j = run.end()
                continue
            c = text[j]
            if c == quote:
                if key or self.closes_string(j):
                    return "".join(out), j + 1, True
                if first_skipped is None:
                    first_skipped = (j, len(out))
                out.append(c)  # an apostrophe or an unescaped inner quote
            elif c == "\\":
                if j + 1 >= n:
                    break
                e = text[j + 1]
                if e == "u":
                    digits = text[j + 2 : j + 6]
                    if len(digits) < 4:
                        break
                    try:
                        out.append(chr(int(digits, 16)))
                    except ValueError:
                        raise _Syntax("bad \\u escape", j) from None
                    j += 6
                    continue
                out.append(_ESCAPES.get(e, e))  # "\'" and other stray escapes keep the character
                j += 2
                continue
            else:
                out.append(c)
            j += 1
        if first_skipped is not None:
            # The text ended inside the string only because a quote was taken as inner: it
            # was the closing one after all, and what follows it is malformed or truncated.
            j, length = first_skipped
            return "".join(out[:length]), j + 1, True
        return "".join(out), n, False

    def object(self, i: int) -> tuple[Any, int, bool]:
        result: dict[str, Any] = {}
        while True:
            i = self.skip(i)
            if i >= self.n:
                return result, i, False
            c = self.text[i]
            if c == "}":
                return result, i + 1, True
            if c == ",":  # trailing or doubled comma
                i += 1
                continue
            if c not in "\"'":
                raise _Syntax(f"expected a quoted key, found {c!r}", i)
            key, i, complete = self.string(i, key=True)
            if not complete:
                return result, i, False
            i = self.skip(i)
            if i >= self.n:
                return result, i, False
            if self.text[i] != ":":
                raise _Syntax(f"expected ':' after key {key!r}", i)
            value, i, complete = self.value(i + 1)
            if value is not _MISSING:
                result[key] = _member(result, key, value)
            if not complete:
                return result, i, False
            i = self.skip(i)
            if i < self.n and self.text[i] not in ",}":
                raise _Syntax(f"expected ',' or '}}' after the value of {key!r}", i)

    def array(self, i: int) -> tuple[Any, int, bool]:
        result: list[Any] = []
        while True:
            i = self.skip(i)
            if i >= self.n:
                return result, i, False
            c = self.text[i]
            if c == "]":
                return result, i + 1, True
            if c == ",":
                i += 1
                continue
            value, i, complete = self.value(i)
            if not complete:
                return result, i, False  # the cut-off element is dropped: keep complete items
            result.append(value)
            i = self.skip(i)
            if i < self.n and self.text[i] not in ",]":
                raise _Syntax(f"expected ',' or ']' after an array element, found {self.text[i]!r}", i)


def strip_thinking(text: str) -> str:
    """Drop reasoning blocks; raise if the text ends inside one (no answer was written).

    ``<think>...</think>`` blocks are cut out; a ``</think>`` without its opening tag (a chat
    template that opens the block itself) drops everything before it; text before a block that
    never closes is kept, and a reply that is only an unclosed block is a ``ParseError``. One
    pass over the text (each tag is searched for once), so thousands of tags cost no more
    than their length."""
    lower = text.lower()
    kept: list[str] = []
    pos = 0
    next_open, next_close = lower.find(_OPEN_THINK), lower.find(_CLOSE_THINK)
    while True:
        # A tag found before ``pos`` was inside a dropped block: look again from ``pos``.
        if 0 <= next_open < pos:
            next_open = lower.find(_OPEN_THINK, pos)
        if 0 <= next_close < pos:
            next_close = lower.find(_CLOSE_THINK, pos)
        if next_close >= 0 and (next_open < 0 or next_close < next_open):
            kept = []  # a lone closing tag: what came before it was reasoning
            pos = next_close + len(_CLOSE_THINK)
        elif next_open >= 0 and next_close >= 0:
            kept.append(text[pos:next_open])
            pos = next_close + len(_CLOSE_THINK)
        elif next_open >= 0:  # a block that never closes
            kept.append(text[pos:next_open])
            before = "".join(kept)
            if not before.strip():
                raise ParseError("the completion ended inside a <think> block (no answer after the reasoning)")
            return before
        else:
            kept.append(text[pos:])
            return "".join(kept)


# End-of-turn tokens of common chat templates (ChatML, Llama 2 and 3, Phi-3, Gemma, GPT-2): a
# reply showing one went on past its own turn (a server that did not stop there), so it ends there.
_END_OF_TURN = re.compile(r"<\|(?:im_end|endoftext|end_of_text|eot_id|eom_id|end)\|>|</s>|<end_of_turn>", re.IGNORECASE)
# Other special tokens (a start-of-turn token with the role it names, "<s>", "<|assistant|>" ...).
_SPECIAL_TOKEN = re.compile(
    r"<\|im_start\|>(?:assistant|user|system)?|<\|start_header_id\|>\w*<\|end_header_id\|>"
    r"|<start_of_turn>(?:model|user)?|<\|[a-z_]{1,32}\|>|<s>",
    re.IGNORECASE,
)


def visible_text(text: str) -> str:
    """What a reply says to its reader: the text without lone surrogates, BOMs and NULs
    (``clean_text``), reasoning blocks (``strip_thinking``, whose ``ParseError`` it raises for a
    reply that is only an unclosed block), anything after an end-of-turn token and other chat
    special tokens. Free-text readers (answerers, the judges' prose) read this."""
    text = strip_thinking(clean_text(text))
    return _SPECIAL_TOKEN.sub("", _END_OF_TURN.split(text, maxsplit=1)[0])


def _candidates(text: str) -> list[str]:
    fenced = [m.group(1) for m in _FENCE.finditer(text) if m.group(1).strip()]
    return fenced + [text] if fenced else [text]


def _starts(candidate: str, openers: str) -> list[int]:
    starts: list[int] = []
    for opener in openers:
        at = candidate.find(opener)
        while at >= 0 and len(starts) < 2 * _MAX_STARTS:
            starts.append(at)
            at = candidate.find(opener, at + 1)
    return sorted(starts)[:_MAX_STARTS]


def _openers(schema: dict[str, Any] | None) -> str:
    kind = (schema or {}).get("type")
    if kind == "object":
        return "{"
    if kind == "array":
        return "["
    return "{["


def _number(token: str) -> int | float | None:
    """A JSON number token's value; None when it is too long or not finite as a float."""
    if len(token) > _MAX_NUMBER_CHARS:
        return None
    if "." not in token and "e" not in token and "E" not in token:  # (a generator here costs seconds per 10^5)
        return int(token)
    value = float(token)
    return value if math.isfinite(value) else None


def _member(obj: dict[str, Any], key: str, value: Any) -> Any:
    """``value`` for ``key`` of ``obj``; ``_Conflict`` when the key already holds another value."""
    if key in obj and obj[key] != value:
        raise _Conflict(key)
    return value


class _Conflict(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} is given twice with different values")
        self.key = key


def _strict_number(token: str) -> int | float:
    value = _number(token)
    if value is None:
        raise ValueError("number too long or too large")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        obj[key] = _member(obj, key, value)
    return obj


# Strict reading with the same refusals as the tolerant reader (a refused value falls through
# to it, which says what was wrong).
_DECODER = json.JSONDecoder(parse_int=_strict_number, parse_float=_strict_number,
                            parse_constant=_refuse_constant, object_pairs_hook=_strict_object)


def _strict(candidate: str, start: int) -> Any:
    try:
        value, _ = _DECODER.raw_decode(candidate, start)
        return value
    except (ValueError, RecursionError):
        return _MISSING


def _tolerant(candidate: str, start: int) -> Any:
    value, _, _ = _Reader(candidate).value(start)
    return value


def parse_json(text: str, schema: dict[str, Any] | None = None) -> Any:
    """The JSON value in an LLM completion (see the module docstring); ``ParseError`` if none."""
    if not isinstance(text, str):
        raise ParseError(f"expected the completion text, got {type(text).__name__}")
    if len(text) > MAX_REPLY_CHARS:
        raise OversizedReplyError(f"the completion is {len(text):,} characters long (at most {MAX_REPLY_CHARS:,} "
                                  "are read as JSON)")
    text = strip_thinking(text)
    if not text.strip():
        raise ParseError("the completion is empty")
    validate = _validator(json.dumps(schema, sort_keys=True)) if schema is not None else None
    try:
        return _find(text, schema, validate)
    except _Conflict as exc:  # the reply contradicts itself: none of its readings is trusted
        raise AmbiguousReplyError(f"ambiguous JSON: {exc}") from None
    except _Runaway as exc:
        raise OversizedReplyError(f"the JSON does not match the schema: {exc}") from None
    except RecursionError:  # a backstop: depth is bounded above, but no reply may crash a stage
        raise ParseError("the JSON is nested too deeply") from None


def _find(text: str, schema: dict[str, Any] | None, validate) -> Any:
    openers = _openers(schema)
    first_error: str | None = None
    schema_error: str | None = None

    def accept(value: Any) -> Any:
        nonlocal first_error, schema_error
        if value is _MISSING:
            return _MISSING
        crowded = _longest_array(value)
        if crowded > MAX_ITEMS:  # a runaway reply: no part of it is searched further
            raise _Runaway(f"an array of {crowded} items (a reply may hold at most {MAX_ITEMS})")
        try:
            value = clean_strings(value, max_depth=_MAX_DEPTH)
        except TooDeep:
            first_error = first_error or f"nested deeper than {_MAX_DEPTH} levels"
            return _MISSING
        if validate is None:
            return value
        problem = validate(value)
        if problem is None:
            return value
        schema_error = schema_error or problem
        return _MISSING

    for candidate in _candidates(text):
        stripped = candidate.strip()
        # A bare scalar answer ("42", "\"yes\"") when the schema asks for one.
        if schema is not None and openers == "{[" and stripped and stripped[0] not in "{[":
            value = accept(_strict(stripped, 0))
            if value is not _MISSING:
                return value
        for start in _starts(candidate, openers):
            value = _strict(candidate, start)
            if value is _MISSING:
                try:
                    value = _tolerant(candidate, start)
                except _Syntax as exc:
                    first_error = first_error or str(exc)
                    continue
            value = accept(value)
            if value is not _MISSING:
                return value
    if schema_error is not None:
        raise ParseError(f"the JSON does not match the schema: {schema_error}")
    if first_error is not None:
        raise ParseError(f"invalid JSON that could not be repaired: {first_error}")
    wanted = {"{": "a JSON object", "[": "a JSON array"}.get(openers, "JSON")
    raise ParseError(f"no {wanted} found in the completion: {_preview(text)}")


class _Runaway(Exception):
    """A candidate holding an array longer than ``MAX_ITEMS``."""


def _longest_array(value: Any) -> int:
    """The length of the longest array in ``value``, counted up to the first one over ``MAX_ITEMS``
    (iterative: the depth of a value the parser built is not yet bounded here)."""
    longest, stack = 0, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            longest = max(longest, len(node))
            if longest > MAX_ITEMS:
                return longest
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())
    return longest


def _preview(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 3] + "...")


@lru_cache(maxsize=256)
def _validator(schema_json: str):
    try:
        import jsonschema
    except ImportError as exc:  # pragma: no cover - jsonschema is a dependency
        raise ImportError("schema validation needs the 'jsonschema' package (pip install jsonschema)") from exc
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"invalid JSON schema: {exc.message}") from None
    # "integer" means a Python int, as the stages that index lists with it need; jsonschema
    # would also pass 1.0.
    integers = cls.TYPE_CHECKER.redefine("integer", lambda _, v: isinstance(v, int) and not isinstance(v, bool))
    validator = jsonschema.validators.extend(cls, type_checker=integers)(schema)

    def validate(value: Any) -> str | None:
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path)
        message = error.message if len(error.message) <= 200 else error.message[:197] + "..."  # it quotes the value
        return message + (f" (at /{where})" if where else " (at the top level)")

    return validate


def object_schema(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """``{"type": "object", ...}`` with every property required unless ``required`` says otherwise."""
    schema = {"type": "object", "properties": properties, "required": list(properties) if required is None else required}
    schema.update(extra)
    return schema


def list_schema(item_schema: dict[str, Any], key: str = "items", min_items: int = 0) -> dict[str, Any]:
    """An object with one array member ``key`` of ``item_schema`` items: ``{"items": [...]}``.

    An object around the list (rather than a bare array) is what constrained decoders and
    OpenAI's structured outputs accept best.
    """
    array: dict[str, Any] = {"type": "array", "items": item_schema}
    if min_items:
        array["minItems"] = min_items
    return object_schema({key: array})
