"""An event's place in its source, as the connector's headers carry it (`outbox.wire.SOURCE`,
`outbox.wire.SOURCE_POSITION`)."""

from __future__ import annotations

from collections.abc import Iterable

from outbox.wire import SOURCE, SOURCE_POSITION

Position = tuple[int, int]  # (last commit LSN, change LSN), compared in that order


def parse_position(text: str | bytes | None) -> Position | None:
    """Debezium's ``sequence`` text (``["24023128","24023160"]``, either may be null) as a
    `Position`; None when absent or not of that shape (the record is then deduplicated by
    offset alone)."""
    if text is None:
        return None
    raw = text.decode("ascii", "replace") if isinstance(text, bytes) else text
    parts = raw.strip().removeprefix("[").removesuffix("]").split(",")
    if len(parts) != 2:
        return None
    values = []
    for part in parts:
        item = part.strip().strip('"')
        if item == "null":
            values.append(0)
        elif item.isascii() and item.isdigit() and len(item) <= 20:
            values.append(int(item))
        else:
            return None
    return values[0], values[1]


def source_position(
    headers: Iterable[tuple[str, bytes | None]],
) -> tuple[str | None, Position | None]:
    """The record's source and its position there, from the connector's headers (both None
    when it carries none, as records written before the connector added them)."""
    source: str | None = None
    position: Position | None = None
    for name, value in headers:
        if name == SOURCE and value is not None:
            source = value.decode("utf-8", "replace")
        elif name == SOURCE_POSITION:
            position = parse_position(value)
    if source is None or position is None:
        return None, None
    return source, position
