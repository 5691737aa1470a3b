"""Reading Kafka's find-hanging table."""

from __future__ import annotations

from outboxkit_workshop.devstack.transactions import Hanging, parse_hanging

HEADER = (
    "Topic\tPartition\tProducerId\tProducerEpoch\tCoordinatorEpoch\tStartOffset\t"
    "LastTimestamp\tDuration(min)\t"
)


def test_rows_become_hanging_transactions_and_everything_else_is_ignored():
    text = "\n".join(
        [
            "SLF4J(W): No SLF4J providers were found.",
            HEADER,
            "_it-connect-offsets\t0\t2\t97\t0\t376\t1795477308912\t6\t",
            "outbox.event.order\t3\t11\t4\t-1\t10250\t1795477308000\t2\t",
        ]
    )
    assert parse_hanging(text) == [
        Hanging("_it-connect-offsets", 0, 2, 97, 376),
        Hanging("outbox.event.order", 3, 11, 4, 10250),
    ]


def test_a_table_without_rows_is_nothing_hanging():
    assert parse_hanging(HEADER + "\n") == []
    assert parse_hanging("") == []
