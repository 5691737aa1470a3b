"""The Spark sink's conversion of an Arrow batch in the Kafka source schema to Kafka records,
against the batch read row by row (``to_pylist``): sliced batches, null and empty header lists,
null header values and timestamps."""

from datetime import UTC, datetime

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from outboxkit.kernel.wire.record import KafkaRecord
from spark_consumers.sink import headers_from_arrow, records_from_arrow

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

header = st.tuples(
    st.sampled_from(["id", "eventType", "traceparent", "ü"]), st.none() | st.binary()
)
row = st.fixed_dictionaries(
    {
        "key": st.none() | st.binary(max_size=8),
        "value": st.none() | st.binary(max_size=8),
        "headers": st.none() | st.lists(header, max_size=4),
        "timestamp": st.none() | st.integers(0, 2**40),
    }
)


def batch_of(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array(["outbox.event.order"] * len(rows)),
            pa.array([3] * len(rows), pa.int32()),
            pa.array(range(100, 100 + len(rows)), pa.int64()),
            pa.array([r["key"] for r in rows], pa.binary()),
            pa.array([r["value"] for r in rows], pa.binary()),
            pa.array(
                [
                    None
                    if r["headers"] is None
                    else [{"key": k, "value": v} for k, v in r["headers"]]
                    for r in rows
                ],
                HEADERS,
            ),
            pa.array([r["timestamp"] for r in rows], pa.timestamp("us")),
        ],
        names=["topic", "partition", "offset", "key", "value", "headers", "timestamp"],
    )


def row_by_row(batch: pa.RecordBatch) -> list[KafkaRecord]:
    """What the sink built before reading the columns whole: each row's dicts."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return [
        KafkaRecord(
            r["topic"],
            r["partition"],
            r["offset"],
            r["key"],
            r["value"],
            [(h["key"], h["value"]) for h in r["headers"] or ()],
            None
            if r["timestamp"] is None
            else (r["timestamp"].replace(tzinfo=UTC) - epoch) // _MILLISECOND,
        )
        for r in batch.to_pylist()
    ]


_MILLISECOND = datetime(1970, 1, 1, 0, 0, 0, 1000, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)


@settings(deadline=None)  # the first example loads Arrow's compute functions
@given(st.lists(row, max_size=12), st.data())
def test_records_from_arrow_reads_what_each_row_holds(rows, data):
    batch = batch_of(rows)
    start = data.draw(st.integers(0, len(rows)))
    sliced = batch.slice(start, data.draw(st.integers(0, len(rows) - start)))
    assert records_from_arrow(sliced) == row_by_row(sliced)


def test_a_null_list_backed_by_entries_reads_as_no_headers():
    # Arrow lets a null list span values; the null's entries must not shift the next record's.
    entries = pa.array(
        [
            {"key": "a", "value": b"1"},
            {"key": "hidden", "value": None},
            {"key": "b", "value": b"2"},
        ],
        HEADERS.value_type,
    )
    column = pa.ListArray.from_arrays(
        pa.array([0, 1, 2, 3], pa.int32()), entries, mask=pa.array([False, True, False])
    )
    assert column.to_pylist()[1] is None
    assert headers_from_arrow(column) == [[("a", b"1")], [], [("b", b"2")]]
    assert headers_from_arrow(column.slice(1)) == [[], [("b", b"2")]]
