"""The per-source states of a partition (`inbox.judgement.SourceState`) as its watermark row
stores them: tops in ``sources``, the ids at them in ``tops``, ``floors``, and the lost and
pending histories of restored databases in ``lost_histories``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inbox.judgement import Lost, SourceState
from inbox.position import from_json, to_json
from outboxkit.kernel.wire.position import Position


def states_from_row(row: Any) -> dict[str, SourceState]:
    """The per-source states a watermark row stores in ``sources`` (tops), ``tops`` (the ids at
    them), ``floors`` and ``lost_histories``."""
    tops, floors = from_json(row.sources), from_json(row.floors)
    ids = row.tops or {}
    losts = losts_from_json(getattr(row, "lost_histories", None))
    out: dict[str, SourceState] = {}
    for key in {*tops, *floors}:
        top = tops.get(key, floors.get(key))
        assert top is not None
        lost, pending = losts.get(key, (None, ()))
        out[key] = SourceState(
            top, frozenset(str(i) for i in ids.get(key, ())), floors.get(key), lost, pending
        )
    return out


def states_to_json(
    states: Mapping[str, SourceState],
) -> tuple[dict[str, list[int]], dict[str, list[str]], dict[str, list[int]]]:
    """``states`` as a watermark row's ``sources``, ``tops`` and ``floors`` columns (their lost
    histories: `losts_to_json`)."""
    tops = to_json({key: state.top for key, state in states.items()})
    ids = {key: sorted(state.at_top) for key, state in states.items() if state.at_top}
    floors = {key: state.floor for key, state in states.items() if state.floor is not None}
    return tops, ids, to_json(floors)


def losts_to_json(states: Mapping[str, SourceState]) -> dict[str, dict[str, Any]]:
    """``states``' lost and pending histories as a watermark row's ``lost_histories``
    column."""
    out: dict[str, dict[str, Any]] = {}
    for key, s in states.items():
        if s.lost is None and not s.pending:
            continue
        lost = s.lost
        out[key] = {
            "lost": None
            if lost is None
            else [list(lost.fork), list(lost.top), lost.marker, lost.before],
            "pending": [[list(fork), marker] for fork, marker in s.pending],
        }
    return out


def losts_from_json(raw: Mapping[str, Any] | None) -> dict[str, tuple[Lost | None, Pending]]:
    """`losts_to_json`'s column read back: per source, its lost and pending histories."""
    out: dict[str, tuple[Lost | None, Pending]] = {}
    for key, value in (raw or {}).items():
        lost = value.get("lost")
        pending = tuple((_position(fork), str(marker)) for fork, marker in value.get("pending", ()))
        out[key] = (
            None
            if lost is None
            else Lost(_position(lost[0]), _position(lost[1]), str(lost[2]), bool(lost[3])),
            pending,
        )
    return out


def _position(value: Sequence[Any]) -> Position:
    return (int(value[0]), int(value[1]))


Pending = tuple[tuple[Position, str], ...]


def losts_changed(
    before: Mapping[str, SourceState], after: Mapping[str, SourceState]
) -> dict[str, dict[str, Any]] | None:
    """``after``'s lost histories as `losts_to_json` writes them when they differ from
    ``before``'s; None (the column kept) when they do not: the common case, none at all."""
    if not any(s.lost or s.pending for s in (*before.values(), *after.values())):
        return None
    was = {k: (s.lost, s.pending) for k, s in before.items() if s.lost or s.pending}
    now = {k: (s.lost, s.pending) for k, s in after.items() if s.lost or s.pending}
    return None if was == now else losts_to_json(after)
