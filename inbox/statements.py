"""The inbox's bookkeeping statements that run in every partition transaction, built once
(`inbox.recorder` runs them): the watermark's lock, the window's lookup, the parked-key lookup,
and the statement that writes the new watermark with the window's new slice and forgets the
slices that left it. Their parameters are named ``p_...`` (``p_consumer``, ``p_topic`` and
``p_partition`` in every one): an UPDATE's execution parameters named like a column of its table
would be read as values to SET."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Table,
    Text,
    bindparam,
    cast,
    column,
    delete,
    func,
    insert,
    null,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

from inbox.tables import parked, recent_ids, watermarks

EVENT_ID = UUID(as_uuid=False)  # an event id as the window holds it, read and bound as str
# A JSON value bound as SQL NULL when None (not JSON null), so COALESCE keeps the column's.
KEPT_WHEN_NONE = JSONB(none_as_null=True)


def split(name: str, item: Any) -> ColumnElement[Any]:
    """The parameter ``name``, one comma-separated text, as an array of ``item`` split by
    Postgres. A slice's ids bound as a list cost psycopg a dump per element in Python: 1,000
    UUIDs took 1.43 ms of client CPU (4.6 ms wall) against 0.18 ms (1.5 ms) joined into one
    text, 1,000 offsets 0.64 against 0.24 ms (measured). Callers join values without commas."""
    return cast(func.string_to_array(bindparam(name, type_=Text), ","), ARRAY(item))


def this_partition(table: Table) -> tuple[ColumnElement[bool], ...]:
    """Filter of ``table`` to one consumer's rows of one topic partition, by named parameters."""
    return (
        table.c.consumer == bindparam("p_consumer"),
        table.c.topic == bindparam("p_topic"),
        table.c.partition == bindparam("p_partition"),
    )


# The partition's watermark row, locked until commit (`Recorder.locked`).
LOCK = (
    select(
        watermarks.c.offset,
        watermarks.c.any_parked,
        watermarks.c.cluster_id,
        watermarks.c.topic_id,
        watermarks.c.sources,
        watermarks.c.stopped,
        watermarks.c.by_position,
        watermarks.c.epoch,
        watermarks.c.floors,
        watermarks.c.source_identities,
        watermarks.c.tops,
        watermarks.c.replay_ids,
        watermarks.c.lost_histories,
    )
    .where(*this_partition(watermarks))
    .with_for_update()
)
# Which wanted ids a partition's window holds: the wanted ids semi-joined with the window's
# slices unnested, which Postgres runs as a hash join (joining the two unnests was planned as a
# merge join, sorting both: 4.8-5.0 against 4.0-4.2 ms for 1,000 ids against a full 10,000-id
# window, measured).
ASKED = (
    func.unnest(split("p_wanted", EVENT_ID))
    .table_valued(column("event_id", EVENT_ID))
    .render_derived("asked")
)
HELD = select(func.unnest(recent_ids.c.event_ids)).where(*this_partition(recent_ids))
RECENT = select(ASKED.c.event_id).where(ASKED.c.event_id.in_(HELD))
# Which of a slice's keys have parked records, by the index on md5(raw_key): one array
# parameter, not an IN list of a parameter per key (rendered and bound anew for each slice).
PARKED_KEYS = (
    select(parked.c.raw_key)
    .distinct()
    .where(*this_partition(parked), func.md5(parked.c.raw_key) == func.any(split("p_md5s", Text)))
)
REMEMBER = insert(recent_ids).values(
    consumer=bindparam("p_consumer"),
    topic=bindparam("p_topic"),
    partition=bindparam("p_partition"),
    first_offset=bindparam("p_first_offset"),
    last_offset=bindparam("p_last_offset"),
    event_ids=split("p_event_ids", EVENT_ID),
    offsets=split("p_offsets", BigInteger),
)
# What a transaction writes last, in ONE statement (one round trip): the new watermark, and with
# a window the slices that left it forgotten and the slice's applied ids remembered. The
# DELETE cannot see the INSERT's row (one snapshot): a new slice already below the floor (its
# records followed by many parked ones) is forgotten by the next transaction, not this one, so
# the window keeps more for a while, never less.
# The identity is kept when the caller gives none (NULL); a partition that moves on is no longer
# stopped.
MARK = (
    update(watermarks)
    .where(*this_partition(watermarks))
    .values(
        offset=bindparam("p_offset"),
        updated_at=func.now(),
        sources=func.coalesce(bindparam("p_sources", type_=KEPT_WHEN_NONE), watermarks.c.sources),
        tops=func.coalesce(bindparam("p_tops", type_=KEPT_WHEN_NONE), watermarks.c.tops),
        lost_histories=func.coalesce(
            bindparam("p_lost", type_=KEPT_WHEN_NONE), watermarks.c.lost_histories
        ),
        replay_ids=func.coalesce(
            bindparam("p_replay_ids", type_=KEPT_WHEN_NONE), watermarks.c.replay_ids
        ),
        source_identities=func.coalesce(
            bindparam("p_identities", type_=KEPT_WHEN_NONE), watermarks.c.source_identities
        ),
        cluster_id=func.coalesce(bindparam("p_cluster_id", type_=Text), watermarks.c.cluster_id),
        topic_id=func.coalesce(bindparam("p_topic_id", type_=Text), watermarks.c.topic_id),
        stopped=null(),
    )
)
PRUNE = delete(recent_ids).where(
    *this_partition(recent_ids), recent_ids.c.last_offset < bindparam("p_floor")
)
MARK_PRUNE = MARK.add_cte(PRUNE.cte("pruned"))
MARK_PRUNE_REMEMBER = MARK_PRUNE.add_cte(REMEMBER.cte("remembered"))
# The event id the window holds at each of the wanted offsets (a slice's replays).
HELD_AT = text(
    """
    SELECT held.offset_, held.event_id::text
    FROM inbox_recent AS r,
         unnest(r.offsets, r.event_ids) AS held(offset_, event_id)
    WHERE r.consumer = :p_consumer AND r.topic = :p_topic AND r."partition" = :p_partition
      AND r.first_offset <= :p_last AND r.last_offset >= :p_first
      AND held.offset_ = ANY(CAST(string_to_array(:p_offsets, ',') AS bigint[]))
    """
)
