import json
import sys
from collections import OrderedDict
from enum import IntEnum

import pytest

from outbox.wire.jsonb import render, utf8_size

# (value, what ``CAST(<value as JSON> AS jsonb)::text`` returns); the integration test
# tests/integration/test_jsonb_rendering.py checks every row against the real Postgres.
EXAMPLES = [
    (None, "null"),
    (True, "true"),
    ({"t": True, "f": False, "n": None}, '{"f": false, "n": null, "t": true}'),
    ("plain", '"plain"'),
    ({}, "{}"),
    ([], "[]"),
    ([[], {}, [None]], "[[], {}, [null]]"),
    ({"a": {"b": [1, 2]}}, '{"a": {"b": [1, 2]}}'),
    # Keys: shorter first, then bytewise; length is in UTF-8 bytes.
    ({"bb": 1, "a": 2, "ccc": 3, "b": 4}, '{"a": 2, "b": 4, "bb": 1, "ccc": 3}'),
    ({"B": 1, "a": 2, "_": 3}, '{"B": 1, "_": 3, "a": 2}'),
    ({"é": 1, "zz": 2, "z": 3, "ab": 4}, '{"z": 3, "ab": 4, "zz": 2, "é": 1}'),
    ({"日": 1, "abcd": 2, "xyz": 3}, '{"xyz": 3, "日": 1, "abcd": 2}'),
    ({"\U0001f600": 1, "\uffff": 2, "aaaa": 3}, '{"\uffff": 2, "aaaa": 3, "\U0001f600": 1}'),
    # Non-string keys as json.dumps writes them; of duplicates the last value stays.
    (
        {1: "a", 2.5: "b", None: "c", False: "d"},
        '{"1": "a", "2.5": "b", "null": "c", "false": "d"}',
    ),
    ({1: "first", "1": "last"}, '{"1": "last"}'),
    # Integers as they are, however large.
    (0, "0"),
    (-17, "-17"),
    (2**63, "9223372036854775808"),
    (-(2**100), "-1267650600228229401496703205376"),
    (10**40, "1" + "0" * 40),
    # Floats as numeric prints Python's shortest repr: positional, scale kept, no -0.
    (1.0, "1.0"),
    (-2.5, "-2.5"),
    (100.0, "100.0"),
    (0.1, "0.1"),
    (1e-4, "0.0001"),
    (1.5e-07, "0.00000015"),
    (-1.5e-07, "-0.00000015"),
    (1e-5, "0.00001"),
    (1e16, "10000000000000000"),
    (1.5e16, "15000000000000000"),
    (1.2345678901234567e20, "123456789012345670000"),
    (1e300, "1" + "0" * 300),
    (-0.0, "0.0"),
    (0.0, "0.0"),
    (5e-324, "0." + "0" * 323 + "5"),
    (2.2250738585072014e-308, "0." + "0" * 307 + "22250738585072014"),
    (1.7976931348623157e308, "17976931348623157" + "0" * 292),
    # Strings: \" \\ \b \f \n \r \t, other controls as \u00xx, everything else as is.
    ('q"b\\s/', '"q\\"b\\\\s/"'),
    ("\b\f\n\r\t", '"\\b\\f\\n\\r\\t"'),
    ("\x01\x1f\x1b", '"\\u0001\\u001f\\u001b"'),
    ("\x7f\x80\u2028\u2029", '"\x7f\x80\u2028\u2029"'),
    ("Zoë ✓ 東京 \U0001f600", '"Zoë ✓ 東京 \U0001f600"'),
    ("\\u0000", '"\\\\u0000"'),  # the six characters, not a NUL
    ({"k": (1, "x")}, '{"k": [1, "x"]}'),
]


@pytest.mark.parametrize(("value", "expected"), EXAMPLES)
def test_renders_as_postgres_jsonb_does(value, expected):
    assert render(value) == expected


@pytest.mark.parametrize(("value", "expected"), EXAMPLES)
def test_rendering_is_the_same_json_value(value, expected):
    """Only the text changes: read back, it is the value json.dumps sent (but a float written
    out without a point, like 1e300, reads back as an int)."""
    sent = json.loads(json.dumps(value), parse_int=float)
    assert json.loads(render(value), parse_int=float) == sent


def test_subclasses_render_as_json_dumps_writes_them():
    class Level(IntEnum):
        HIGH = 3

    class Name(str):
        pass

    value = OrderedDict([("b", Level.HIGH), ("a", Name("x")), ("c", [1.5])])
    assert render(value) == '{"a": "x", "b": 3, "c": [1.5]}'


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a\x00b", "NUL"),
        ({"k\x00": 1}, "NUL"),
        ([{"deep": ["\x00"]}], "NUL"),
        ("\ud800", "surrogate"),
        ({"\udfff": 1}, "surrogate"),
        (float("nan"), "not JSON compliant"),
        ([float("inf")], "not JSON compliant"),
        ({float("-inf"): 1}, "not JSON compliant"),
    ],
)
def test_what_jsonb_cannot_hold_is_a_value_error(value, message):
    with pytest.raises(ValueError, match=message):
        render(value)


@pytest.mark.parametrize("value", [object(), {1, 2}, {"k": b"bytes"}, {(1, 2): "tuple key"}])
def test_what_json_cannot_hold_is_a_type_error(value):
    with pytest.raises(TypeError):
        render(value)


def test_circular_or_too_deep_is_a_value_error():
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="too deeply"):
        render(loop)
    deep: list[object] = []
    for _ in range(sys.getrecursionlimit() + 10):
        deep = [deep]
    with pytest.raises(ValueError, match="too deeply"):
        render(deep)


def test_integers_beyond_numeric_range_are_refused():
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        assert render(10**131_071) == "1" + "0" * 131_071  # 131,072 digits: numeric's most
        with pytest.raises(ValueError, match="overflows"):
            render(-(10**131_072))
    finally:
        sys.set_int_max_str_digits(limit)


def test_integers_python_will_not_print_are_refused_as_json_dumps_does():
    with pytest.raises(ValueError, match="digits"):
        render(10**5000)


def test_utf8_size_counts_bytes():
    assert utf8_size("abc") == 3
    assert utf8_size("é✓\U0001f600") == 2 + 3 + 4
