"""How `outboxkit consume` shares queries between jobs, and where a query without a checkpoint
starts (pure: no Spark, no broker)."""

from __future__ import annotations

from spark_consumers.job import Job
from spark_consumers.runner import query_groups, starting_offsets, topics_of


def job(name: str, *topics: str, servers: str = "k:9092", **options: str) -> Job:
    return Job(
        name=name,
        topics=topics,
        consumer=name,
        handlers=lambda event, uow: None,
        database_url="postgresql+psycopg://x/y",
        bootstrap_servers=servers,
        kafka_options=options,
    )


def test_jobs_of_one_cluster_share_a_query_and_each_topic_is_read_once():
    a, b = job("a", "t.order", "t.shipment"), job("b", "t.payment", "t.order")
    other = job("c", "t.order", servers="elsewhere:9092")
    assert query_groups([a, b, other], shared=True) == [(a, b), (other,)]
    assert query_groups([a, b, other], shared=False) == [(a,), (b,), (other,)]
    assert topics_of([a, b]) == ("t.order", "t.payment", "t.shipment")


def test_jobs_with_other_client_options_get_their_own_query():
    a, b = job("a", "t"), job("b", "t", **{"security.protocol": "SSL"})
    assert query_groups([a, b], shared=True) == [(a,), (b,)]


def test_a_shared_query_starts_at_the_lowest_inbox_position_of_the_jobs_reading_a_partition():
    a, b = job("a", "t.order", "t.shipment"), job("b", "t.order")
    positions = [
        (a, {("t.order", 0): 10, ("t.order", 1): 7, ("t.shipment", 0): 3}),
        (b, {("t.order", 0): 4}),  # b never applied t.order[1]
    ]
    partitions = {"t.order": [0, 1], "t.shipment": [0, 1]}
    assert starting_offsets(positions, partitions) == {
        "t.order": {"0": 4, "1": -2},  # -2: earliest, b has no watermark there
        "t.shipment": {"0": 3, "1": -2},  # only a reads it
    }
