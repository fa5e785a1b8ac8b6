from __future__ import annotations

import pytest

from memlab.lm.errors import ParseError
from memlab.lm.jsonparse import list_schema, object_schema, parse_json, strip_thinking

REPAIRS = [
    # (completion text, expected value)
    ('{"a": 1}', {"a": 1}),
    ("  [1, 2, 3]\n", [1, 2, 3]),
    ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
    ('Here you go:\n```\n{"a": 1}\n```\nAnything else?', {"a": 1}),
    ('Sure! The answer is {"name": "Ann", "age": 31}. Let me know.', {"name": "Ann", "age": 31}),
    ("<think>The user wants {x}. I'll answer.</think>\n{\"ok\": true}", {"ok": True}),
    ("I should list them...</think>[\"a\"]", ["a"]),  # template opened the block itself
    ('<THINK>ignore [1]</THINK>["kept"]', ["kept"]),
    ('{"a": [1, 2,], "b": 3,}', {"a": [1, 2], "b": 3}),
    ("{'name': 'Bob', 'city': 'Paris'}", {"name": "Bob", "city": "Paris"}),
    ("{'note': 'it's Bob's'}", {"note": "it's Bob's"}),
    ("{'q': 'say \"hi\"'}", {"q": 'say "hi"'}),
    ('{"quote": "He said "hello" to me"}', {"quote": 'He said "hello" to me'}),
    ('{"a": True, "b": False, "c": None}', {"a": True, "b": False, "c": None}),
    ('{"a": 1, // the first\n "b": /* inline */ 2}', {"a": 1, "b": 2}),
    ('{"text": "line one\nline two"}', {"text": "line one\nline two"}),
    ('{"e": "caf\\u00e9 \\"q\\" \\n"}', {"e": 'café "q" \n'}),
    ('{"n": -1.5e2, "m": 0}', {"n": -150.0, "m": 0}),
    # Truncated output: complete items are kept, open strings/brackets closed.
    ('{"facts": ["Alice likes tea", "Bob moved to Oslo", "Carol wa', {"facts": ["Alice likes tea", "Bob moved to Oslo"]}),
    ('[{"id": 1, "t": "x"}, {"id": 2, "t": "y"}, {"id": 3, "t": "z', [{"id": 1, "t": "x"}, {"id": 2, "t": "y"}]),
    ('{"answer": "The meeting was on Tuesday and', {"answer": "The meeting was on Tuesday and"}),
    ('{"a": 1, "b": {"c": [1, 2', {"a": 1, "b": {"c": [1]}}),
    ('{"a": 1, "b": tr', {"a": 1}),
    ('{"a": 1, "b"', {"a": 1}),
    ('{"a": 1, "b":', {"a": 1}),
    ('{"a": 1, "score": 0.', {"a": 1}),
    ('[1, 2, 3', [1, 2]),
    ('```json\n{"items": ["a", "b"', {"items": ["a", "b"]}),
    ('{"s": "escape at the cut \\', {"s": "escape at the cut "}),
]


@pytest.mark.parametrize("text,expected", REPAIRS)
def test_repairs(text, expected):
    assert parse_json(text) == expected


FAILURES = [
    ("", "empty"),
    ("   \n ", "empty"),
    ("I don't know the answer.", "no JSON found"),
    ("{name: 'Bob'}", "quoted key"),
    ('{"a" 1}', "expected ':'"),
    ('[1 2]', "expected ','"),
    ("<think>I am still thinking about {this}", "<think>"),
    ('{"a": @}', "unexpected character"),
    ('{"a": "x" 1}', "after the value of 'a'"),  # an inner-quote guess that never closes is undone
    ('{"q": "He said "hi" and then', "after the value of 'q'"),
]


@pytest.mark.parametrize("text,message", FAILURES)
def test_failures_say_what_was_wrong(text, message):
    with pytest.raises(ParseError, match=message):
        parse_json(text)


def test_non_string_input_is_refused():
    with pytest.raises(ParseError, match="NoneType"):
        parse_json(None)  # type: ignore[arg-type]


PERSON = object_schema({"name": {"type": "string"}, "age": {"type": "integer"}})


def test_schema_validates_and_reports_the_violation():
    assert parse_json('{"name": "Ann", "age": 3}', PERSON) == {"name": "Ann", "age": 3}
    with pytest.raises(ParseError, match="'age' is a required property"):
        parse_json('{"name": "Ann"}', PERSON)
    with pytest.raises(ParseError, match=r"not of type 'integer' \(at /age\)"):
        parse_json('{"name": "Ann", "age": "three"}', PERSON)


def test_schema_picks_the_matching_candidate():
    # The first JSON value in the text does not match; a later one does.
    text = 'Example: {"foo": 1}. Real answer: {"name": "Bo", "age": 5}'
    assert parse_json(text, PERSON) == {"name": "Bo", "age": 5}
    # The schema's top-level type decides which bracket starts the JSON.
    assert parse_json('{"x": 1} then [1, 2]', {"type": "array"}) == [1, 2]
    # A wrapped answer: the nested object that matches is taken.
    assert parse_json('{"result": {"name": "Cy", "age": 9}}', PERSON) == {"name": "Cy", "age": 9}


def test_schema_on_scalars_and_truncation():
    assert parse_json("42", {"type": "integer"}) == 42
    schema = list_schema({"type": "string"}, key="facts", min_items=1)
    assert parse_json('{"facts": ["a", "b", "c', schema) == {"facts": ["a", "b"]}
    with pytest.raises(ParseError, match="should be non-empty|is too short"):
        parse_json('{"facts": ["only a partial', schema)


def test_invalid_schema_is_a_programming_error():
    with pytest.raises(ValueError, match="invalid JSON schema"):
        parse_json("{}", {"type": "no-such-type"})


def test_strip_thinking():
    assert strip_thinking("<think>a</think>b<think>c</think>d") == "bd"
    assert strip_thinking("answer first <think>then thoughts") == "answer first "
