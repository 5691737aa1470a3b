"""An event's place in its source, as the connector's headers carry it
(`outboxkit.kernel.wire.SOURCE`, `outboxkit.kernel.wire.SOURCE_POSITION`)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from outboxkit.kernel.wire import SOURCE, SOURCE_POSITION

Position = tuple[int, int]  # (last commit LSN, change LSN), compared in that order


# Debezium's sequence text: two LSNs as decimal strings (or null), in a JSON array.
_SEQUENCE = re.compile(r'\[\s*(?:"(\d{1,20})"|null)\s*,\s*(?:"(\d{1,20})"|null)\s*\]')


def parse_position(text: str | bytes | None) -> Position | None:
    """Debezium's ``sequence`` text (``["24023128","24023160"]``) as a `Position`; None when
    absent, not of that shape, or with a null part (the record is then judged by offset). A
    connector that starts with no stored offset writes ``[null,"<lsn>"]`` until its first
    commit: a last commit LSN it does not know, not one lower than every other."""
    if text is None:
        return None
    raw = text.decode("ascii", "replace") if isinstance(text, bytes) else text
    # The connector's own shape, ["<digits>","<digits>"], without the pattern: most records
    commit_text, sep, change_text = raw[2:-2].partition('","')
    if (
        sep
        and raw[:2] == '["'
        and raw[-2:] == '"]'
        and 0 < len(commit_text) <= 20
        and 0 < len(change_text) <= 20
        and commit_text.isascii()
        and commit_text.isdigit()
        and change_text.isascii()
        and change_text.isdigit()
    ):
        return int(commit_text), int(change_text)
    found = _SEQUENCE.fullmatch(raw)
    if found is None:
        return None
    commit, change = found.groups()
    if commit is None or change is None:
        return None
    return int(commit), int(change)


def source_position(
    headers: Iterable[tuple[str, bytes | None]],
) -> tuple[str | None, Position | None]:
    """The record's source and its position there, from the connector's headers (both None
    when it carries none, as records written before the connector added them; the position
    alone None when it cannot be read, as a fresh connector's first transaction)."""
    source: str | None = None
    position: Position | None = None
    for name, value in headers:
        if name == SOURCE and value is not None:
            source = value.decode("utf-8", "replace")
        elif name == SOURCE_POSITION:
            position = parse_position(value)
    if source is None:
        return None, None
    return source, position
