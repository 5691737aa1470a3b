"""Where an event stands in its source, and what a partition's offsets refer to (pure, no I/O).

An offset names a record in one incarnation of a topic on one cluster: a topic deleted and
re-created starts again at 0, a mirrored cluster holds the same records at other offsets. A
`TopicIdentity` (the cluster's id and the topic's id, KIP-516) says which incarnation a
watermark's offsets belong to.

A `Position` names an event in its source database: Debezium's ``sequence`` for Postgres, the
last commit's LSN then the change's own LSN. Debezium emits a source's events in the order their
transactions committed, so positions grow along a partition whatever the topic's incarnation or
cluster; a re-send repeats its original's position."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from outboxkit.kernel.wire.position import Position


@dataclass(frozen=True)
class TopicIdentity:
    """What the offsets of one topic refer to: the cluster and the topic's incarnation."""

    cluster_id: str
    topic_id: str

    def describe(self) -> str:
        return f"topic id {self.topic_id} on cluster {self.cluster_id}"


def source_keys(
    seen: Iterable[tuple[str | None, str | None]], identities: Mapping[str, str]
) -> tuple[list[str | None], dict[str, str]]:
    """The key each record's position is kept under, and the partition's source identities
    after them. ``seen``: each record's source name and its database's identity (None: the
    connector writes none), in offset order; ``identities``: per key, the identity of the
    database it stands for. A database known here keeps its key whatever name it comes under
    now (a source renamed: its positions still judge its re-sends); a new database gets its
    name as its key, or ``name@identity`` when another database has the name already (two
    databases left on the default name, on Connect clusters that cannot see each other): a
    source of its own, whose positions never judge the first one's events."""
    out = dict(identities)
    known = {origin: key for key, origin in out.items()}
    keys: list[str | None] = []
    for source, origin in seen:
        if source is None or origin is None:
            keys.append(source)
            continue
        key = known.get(origin)
        if key is None:
            key = source if source not in out else f"{source}@{origin}"
            out[key], known[origin] = origin, key
        keys.append(key)
    return keys, out


def identity_of(key: str, identities: Mapping[str, str]) -> str | None:
    """The database identity the source ``key`` stands for in a partition (None: not known)."""
    found = identities.get(key)
    if found is None and "@" in key:
        found = key.split("@", 1)[1]
    return found


def key_for(name: str, identity: str, taken: Collection[str]) -> str:
    """The key a partition whose keys are ``taken`` gives a database it has not seen: its name,
    else ``name@identity``."""
    return name if name not in taken else f"{name}@{identity}"


def to_json(positions: Mapping[str, Position]) -> dict[str, list[int]]:
    return {source: [commit, change] for source, (commit, change) in positions.items()}


def from_json(raw: Mapping[str, object] | None) -> dict[str, Position]:
    out: dict[str, Position] = {}
    for source, value in (raw or {}).items():
        if isinstance(value, list) and len(value) == 2:
            out[source] = (int(value[0]), int(value[1]))
    return out


class OffsetsMoved(RuntimeError):
    """A partition's offsets no longer mean what its watermark says: it stops. ``rebased``: its
    sources' positions can take over, and the consumer driver starts it over when it restarts
    (`inbox.moves`); else an operator must (`outboxkit inbox rebase`)."""

    def __init__(self, reason: str, *, rebased: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.rebased = rebased


def judge_identity(
    stored: TopicIdentity | None,
    seen: TopicIdentity | None,
    positions: Mapping[str, Position],
) -> OffsetsMoved | None:
    """None when ``seen`` is what the watermark's offsets refer to (or either is unknown: the
    seen one is recorded); else what to do: rebase when the partition's sources have positions
    to judge by, stop when they have none."""
    if stored is None or seen is None or stored == seen:
        return None
    what = f"{stored.describe()} became {seen.describe()} (a re-created topic, or another cluster)"
    if positions:
        return OffsetsMoved(
            f"{what}: the consumer starts it over from its start, judged by source positions",
            rebased=True,
        )
    return OffsetsMoved(
        f"{what}, and its records carry no source position: stopped; see the runbook "
        "'When offsets change' (outboxkit inbox rebase)",
        rebased=False,
    )


class Superseded(OffsetsMoved):
    """The partition was started over after the caller's reader started: its records may come
    from the middle of the new topic. Nothing is recorded; the caller's query must restart."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, rebased=False)
