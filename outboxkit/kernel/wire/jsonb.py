"""What Postgres makes of JSON in a ``jsonb`` column, as text.

Debezium sends the outbox's ``payload`` and ``headers`` columns as their jsonb text (what
``CAST(<json> AS jsonb)::text`` returns), not as the JSON we inserted: ``", "`` and ``": "``
separators, object keys shorter-first then bytewise, the last of duplicate keys, and numbers as
Postgres ``numeric`` prints them (``1e300`` becomes 301 digits). `render` computes that text, so
that a record's size is checked as Kafka will see it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from decimal import Decimal
from typing import Any

# Postgres's escape_json: \" \\ \b \f \n \r \t, other characters below U+0020 as \u00xx (lower
# case), everything else as is (UTF-8) -- the same as json's string encoder without ASCII escapes.
_quote: Callable[[str], str] = json.encoder.encode_basestring
# A NUL written as \u0000 (after an even number of backslashes, so not a literal "\\u0000").
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# numeric_in refuses more than 131,072 digits before the decimal point.
_NUMERIC_MAX_DIGITS = 131_072


def render(value: Any) -> str:
    """The text of ``CAST(<value as JSON> AS jsonb)::text``; ValueError or TypeError when the
    value is not JSON (as json.dumps says) or jsonb cannot hold it (NUL, lone surrogates)."""
    out: list[str] = []
    try:
        _write(value, out.append)
    except RecursionError:
        raise ValueError("nested too deeply (or contains itself)") from None
    text = "".join(out)
    check_storable(text)
    return text


def check_storable(text: str) -> None:
    """ValueError when the JSON ``text`` holds what jsonb cannot store: a NUL (written
    ``\\u0000``) or a lone surrogate (not UTF-8)."""
    if "\\u0000" in text and _ESCAPED_NUL.search(text):
        raise ValueError("contains a NUL character (\\u0000), which jsonb cannot store")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"contains a lone surrogate, which is not UTF-8: {exc}") from None


def size_bound(compact: str) -> int | None:
    """An upper bound of the UTF-8 size of ``render(value)``, given ``compact``, the value as
    ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` writes it; None when there
    is no cheap one.

    The two texts differ only where jsonb adds a space after each ``,`` and ``:`` separator
    (one byte each at most: counting those inside strings too only overestimates), orders keys
    (the same bytes), keeps the last of duplicate keys and prints ``-0.0`` as ``0.0`` (fewer
    bytes), and writes numbers in exponent notation out in full (``1e+300``: 301 digits): a
    text with one has no bound here. Integers are the same digits, as long as Python cannot print
    one longer than numeric holds (its int_max_str_digits limit, 4,300 by default)."""
    if _exponent(compact) or not 0 < sys.get_int_max_str_digits() <= _NUMERIC_MAX_DIGITS:
        return None
    return utf8_size(compact) + compact.count(",") + compact.count(":")


def _exponent(text: str) -> bool:
    """Whether the compact JSON ``text`` may hold a number in exponent notation, as Python
    writes one (``1e+16``, ``-1.5e-07``): ``e+`` or ``e-`` after digits (a ``.`` and a sign
    among them) that follow ``[``, ``,``, ``:`` or the start, where a JSON value starts. Text
    inside a string only looks like one rarely (a UUID's ``...3f1e-`` does not: ``f`` starts
    no number) and then costs the exact path, no more. Substring searches: a regular expression
    tried at every position costs ten times more on a large payload."""
    for marker in ("e+", "e-"):
        at = text.find(marker, 1)
        while at != -1:
            start = at - 1
            while start >= 0 and text[start] in "0123456789.":
                start -= 1
            if start < at - 1:  # digits before the e
                if start >= 0 and text[start] == "-":
                    start -= 1
                if start < 0 or text[start] in "[,:":
                    return True
            at = text.find(marker, at + 2)
    return False


def utf8_size(text: str) -> int:
    """The length of ``text`` in UTF-8 bytes."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _write(value: Any, emit: Callable[[str], Any]) -> None:
    kind = type(value)
    if kind is str:
        emit(_quote(value))
    elif kind is dict:
        if not value:
            emit("{}")
            return
        members, keys = _members(value)
        separator = "{"
        for key in keys:
            emit(separator)
            emit(_quote(key))
            emit(": ")
            _write(members[key], emit)
            separator = ", "
        emit("}")
    elif kind is list or kind is tuple:
        if not value:
            emit("[]")
            return
        separator = "["
        for item in value:
            emit(separator)
            _write(item, emit)
            separator = ", "
        emit("]")
    elif kind is int:
        emit(_integer(value))
    elif kind is float:
        emit(_number(value))
    else:
        _write_other(value, emit)


def _write_other(value: Any, emit: Callable[[str], Any]) -> None:
    """None, booleans, and subclasses of the JSON types, written as json.dumps writes them."""
    if value is None:
        emit("null")
    elif value is True:
        emit("true")
    elif value is False:
        emit("false")
    elif isinstance(value, str):
        emit(_quote(value))
    elif isinstance(value, int):
        emit(_integer(value))
    elif isinstance(value, float):
        emit(_number(value))
    elif isinstance(value, list | tuple):
        _write(list(value), emit)
    elif isinstance(value, dict):
        _write(dict(value.items()), emit)
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _integer(value: int) -> str:
    text = int.__repr__(value)  # ValueError past sys.get_int_max_str_digits(), as json.dumps
    digits = len(text) - (value < 0)
    if digits > _NUMERIC_MAX_DIGITS:
        raise ValueError(f"an integer of {digits} digits overflows Postgres numeric")
    return text


def _number(value: float) -> str:
    """A float as numeric prints it: Python's shortest repr, in positional notation, no -0."""
    text = float.__repr__(value)
    if "n" in text:  # inf, -inf, nan
        raise ValueError(f"Out of range float values are not JSON compliant: {text}")
    if "e" in text:
        # numeric keeps the literal's digits and scale: 1e+300 -> "1" and 300 zeros,
        # 1.5e-07 -> "0.00000015"; Decimal's fixed-point format does the same.
        return format(Decimal(text), "f")
    return "0.0" if text == "-0.0" else text


def _members(obj: dict[Any, Any]) -> tuple[dict[Any, Any], list[Any]]:
    """An object's members as jsonb keeps them, and their keys in jsonb's order."""
    try:
        keys = sorted(obj)
        ascii_only = all(map(str.isascii, keys))
    except TypeError:  # a key that is not a str: json.dumps writes it as a string
        written: dict[str, Any] = {}
        for key, value in obj.items():
            text = _key(key)
            if text in written:  # jsonb keeps the last value, but parses the one it drops:
                dropped: list[str] = []  # a NUL in it is refused all the same
                _write(written[text], dropped.append)
                check_storable("".join(dropped))
            written[text] = value
        obj = written
        keys = sorted(obj)
        ascii_only = all(map(str.isascii, keys))
    # jsonb orders keys by length in bytes, then bytewise; UTF-8 bytes sort as code points do.
    keys.sort(key=len if ascii_only else _byte_length)
    return obj, keys


def _byte_length(key: str) -> int:
    return len(key.encode("utf-8"))


def _key(key: Any) -> str:
    """A non-string key as json.dumps writes it (its text, not its numeric rendering)."""
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        text = float.__repr__(key)
        if "n" in text:
            raise ValueError(f"Out of range float values are not JSON compliant: {text}")
        return text
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
