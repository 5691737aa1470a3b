import json
import re
import sys
from collections import OrderedDict
from enum import IntEnum

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from outboxkit.kernel.wire.jsonb import check_storable, render, size_bound, utf8_size

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


def compact(value: object) -> str:
    """``value`` as publish encodes it before Postgres casts it to jsonb."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


# Any JSON value, with what stresses the bound: separators inside strings, exponent notation,
# negative zero, keys that collide once written (1 and "1"), multi-byte characters; NULs and
# lone surrogates too, which check_storable must find in the compact text as render does.
_chars = st.characters() | st.sampled_from(list(',:"\\\x00\x1fé日\U0001f600\ud800'))
_strings = st.text(_chars, max_size=10)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1e16, 1e300, 1.5e-07, -0.0, 5e-324, 10**40])
    | _strings
)
_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(_strings | st.integers(0, 3), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values)
@example({"a": "1e+5 in a string", 1: [1e300], "1": -0.0})
@example(["\x00", "\\u0000"])
@example({0: ["\x00"], "0": None})  # a NUL in the duplicate jsonb drops, still parsed
def test_the_size_bound_holds_and_the_text_check_refuses_what_render_refuses(value):
    text = compact(value)
    try:
        rendered: str | None = render(value)
    except ValueError:
        rendered = None
    try:
        check_storable(text)
        storable = True
    except ValueError:
        storable = False
    assert storable == (rendered is not None)
    if rendered is None:
        return
    bound = size_bound(text)
    if bound is not None:
        assert utf8_size(rendered) <= bound
    if bound is None:  # only numbers in exponent notation (or text that looks like one)
        assert re.search(r"[\[,:]-?[0-9.]+e[-+]|^-?[0-9.]+e[-+]", text)


def test_the_size_bound_is_close_for_plain_payloads():
    value = {"id": "b1f0", "items": [{"sku": "A-1", "qty": 2, "price": 9.5}] * 3, "n": 7}
    bound, exact = size_bound(compact(value)), utf8_size(render(value))
    assert bound is not None and exact <= bound <= exact + 2  # two ',' or ':' in strings: none


def test_no_size_bound_where_exponents_or_unlimited_integers_make_one_unsafe():
    assert size_bound(compact([1e300])) is None  # 6 characters compact, 301 digits as jsonb
    assert size_bound(compact({"x": -1.5e-07})) is None
    assert size_bound(compact(1e16)) is None
    # What only looks like one: a UUID's "...3f1e-...", words with "e-"; a bound exists.
    looks_like = {"id": "0c1f3f1e-1234-12e4-8e2b-1e-5", "w": "pre-paid"}
    assert size_bound(compact(looks_like)) == utf8_size(render(looks_like))  # ', ' and ': ' once
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # Python would print integers longer than numeric holds
    try:
        assert size_bound(compact([1])) is None
    finally:
        sys.set_int_max_str_digits(limit)
