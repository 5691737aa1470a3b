"""The setting the console is measured in: a topic with records on every partition, and a
consumer's watermarks and parked records over it, made by bulk SQL as a real backlog would leave
them (see the package's docstring)."""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, create_engine, pool, text

CONSUMER = "bench-console"
JOB_NAME = "payments"
RETRY_EVERY = 10  # one parked record in this many waits for a retry
KEYS = 5000  # distinct record keys

# Parked records' errors: %1$s a number that differs on each record, %2$s a small one, %3$s a
# UUID. Each is a cause of its own once Postgres replaced numbers, ids and quoted text.
ERRORS = (
    "handler failed: ValueError: cannot charge order %1$s amount -%2$s",
    "handler failed: KeyError: 'customer_%1$s'",
    "handler failed: LookupError: no order %3$s",
    'handler failed: TypeError: amount must be a number, got "x%1$s"',
    'handler failed: IntegrityError: duplicate key value violates unique constraint "orders_pkey"'
    " (order %1$s)",
    "handler failed: TimeoutError: the payment gateway did not answer within %2$s s",
    "handler failed: ConnectionError: ledger at 10.0.0.%2$s:8080 refused the connection",
    "undecodable record: invalid JSON at byte %2$s",
    "unknown event type 'OrderArchived%2$s'",
    "handler failed: ValueError: quantity %2$s exceeds the stock %1$s of sku 'SKU-%1$s'",
    "handler failed: PermissionError: account %1$s is frozen",
    "handler failed: ValueError: currency 'X%2$s' is not supported",
    "handler failed: RuntimeError: shipment %3$s was dispatched already",
    'handler failed: ValidationError: field "email" of customer %1$s is not an address',
    "handler failed: ZeroDivisionError: division by zero in the discount of order %1$s",
    "handler failed: OverflowError: amount %1$s99 is too large",
    "handler failed: AssertionError: order %1$s has no lines",
    "handler failed: DataError: value too long for type character varying(%2$s)",
    "held behind a parked record of key order-%1$s",
    "handler failed: ValueError: refund %2$s of order %1$s exceeds what was paid",
)
TRACEBACK = "\nTraceback (most recent call last):\n" + "".join(
    f'  File "/srv/payments/handlers.py", line {40 + i}, in charge_{i}\n    step_{i}(order)\n'
    for i in range(8)
)

SEED_PARKED = text(
    """
    INSERT INTO inbox_parked (
        consumer, topic, "partition", "offset", raw_key, payload, header_names, header_values,
        timestamp_ms, key, event_id, event_type, headers, error, attempts, first_seen,
        last_seen, history, retry_at)
    SELECT :consumer, :topic, s.n % :partitions, s.n / :partitions,
        convert_to(s.k, 'UTF8'),
        convert_to(json_build_object(
            'order', s.n, 'amount', -(s.n % 97), 'note', repeat('x', 160))::text, 'UTF8'),
        ARRAY[convert_to('id', 'UTF8'), convert_to('eventType', 'UTF8')],
        ARRAY[convert_to(s.id, 'UTF8'), convert_to('Charge', 'UTF8')],
        (extract(epoch FROM s.seen) * 1000)::bigint,
        s.k, s.id, 'Charge',
        jsonb_build_object('id', s.id, 'eventType', 'Charge'),
        format(t.errors[s.c + 1], s.n, s.n % 97, s.other)
            || CASE WHEN s.n % 2 = 0 THEN :traceback ELSE '' END,
        1 + s.n % 5,
        s.seen - interval '5 minutes', s.seen,
        jsonb_build_array(jsonb_build_object('at', s.seen, 'error', 'handler failed')),
        CASE WHEN s.n % :retry_every = 0 THEN now() + make_interval(secs => 60 + s.n % 3600) END
    FROM (
        SELECT n, 'order-' || (n % :keys) AS k,
            md5('bench-console-' || n)::uuid::text AS id,
            md5('other-' || n)::uuid::text AS other,
            floor(:causes * power(((n * 7919) % 10007) / 10007.0, 2))::int AS c,
            now() - make_interval(secs => (n * 7) % 604800) AS seen
        FROM generate_series(0, :parked - 1) AS n
    ) AS s, (SELECT CAST(:errors AS text[]) AS errors) AS t
    """
)
SEED_WATERMARKS = text(
    'INSERT INTO inbox_watermark (consumer, topic, "partition", "offset") '
    "SELECT :consumer, :topic, p, "
    ":records - 1 - CASE WHEN p % 2 = 1 THEN 1 + p / 2 % 8 * 5 ELSE 0 END "
    "FROM generate_series(0, :partitions - 1) AS p"
)


def behind(partition: int) -> int:
    """Records of ``partition`` not applied yet (SEED_WATERMARKS): every odd partition a few
    (1 to 36), as a consumer that keeps up is behind while its next batches run."""
    return 1 + partition // 2 % 8 * 5 if partition % 2 == 1 else 0


@dataclass
class Setting:
    """What the benchmark made: its topic, the records per partition, a parked event id and the
    largest failure group's cause."""

    topic: str
    records: int
    lag: int
    lagging: int
    causes: int
    retrying: int
    event_id: str = ""
    cause: str = ""
    seconds: dict[str, float] = field(default_factory=dict)


def records_per_partition(parked: int, partitions: int) -> int:
    """Records on each partition: above every parked offset and every watermark's lag."""
    return math.ceil(parked / partitions) + max(behind(p) for p in range(partitions)) + 1


def produce(kafka: dict[str, Any], topic: str, partitions: int, records: int) -> None:
    """``records`` records on each partition of ``topic`` (created here)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(dict(kafka))
    admin.create_topics([NewTopic(topic, partitions, replication_factor=-1)])[topic].result(30)
    producer = Producer({**kafka, "linger.ms": 20, "acks": "all"})
    value = b'{"order": 0, "amount": 5, "note": "' + b"x" * 80 + b'"}'
    for p in range(partitions):
        for offset in range(records):
            headers: list[tuple[str, str | bytes | None]] = [
                ("id", str(uuid.uuid4()).encode()),
                ("eventType", b"Charge"),
            ]
            while True:
                try:
                    producer.produce(
                        topic,
                        value,
                        f"order-{offset % KEYS}".encode(),
                        partition=p,
                        headers=headers,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"records for {topic} still unacknowledged after 120 s")


def delete_topic(kafka: dict[str, Any], topic: str) -> None:
    """Delete ``topic`` (a broker that cannot keeps it)."""
    from confluent_kafka.admin import AdminClient

    for done in AdminClient(dict(kafka)).delete_topics([topic]).values():
        with contextlib.suppress(Exception):  # a broker that cannot delete keeps it
            done.result(30)


def seed(url: str, topic: str, parked: int, partitions: int, records: int) -> Setting:
    """The migrated database's watermarks and parked records (bulk SQL), vacuumed and analysed."""
    from migrations.runner import upgrade

    upgrade(url)
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        seconds = {"insert": _insert(engine, topic, parked, partitions, records)}
        seconds["vacuum"] = _vacuum(engine)
        causes, retrying, cause, event_id = _found(engine, parked)
    finally:
        engine.dispose()
    lags = [behind(p) for p in range(partitions)]
    return Setting(
        topic,
        records,
        sum(lags),
        sum(1 for lag in lags if lag),
        causes,
        retrying,
        event_id,
        cause,
        seconds,
    )


def _insert(engine: Engine, topic: str, parked: int, partitions: int, records: int) -> float:
    """The watermarks and the parked records, in one transaction: seconds the parked records'
    INSERT took, with the commit."""
    with engine.begin() as conn:
        params = {"consumer": CONSUMER, "topic": topic, "partitions": partitions}
        conn.execute(SEED_WATERMARKS, {**params, "records": records})
        began = time.perf_counter()
        conn.execute(
            SEED_PARKED,
            {
                **params,
                "parked": parked,
                "keys": KEYS,
                "causes": len(ERRORS),
                "errors": list(ERRORS),
                "traceback": TRACEBACK,
                "retry_every": RETRY_EVERY,
            },
        )
    return time.perf_counter() - began


def _vacuum(engine: Engine) -> float:
    """Seconds VACUUM (ANALYZE) of the parked records and the watermarks took."""
    began = time.perf_counter()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM (ANALYZE) inbox_parked"))
        conn.execute(text("VACUUM (ANALYZE) inbox_watermark"))
    return time.perf_counter() - began


def _found(engine: Engine, parked: int) -> tuple[int, int, str, str]:
    """What was seeded: its causes, the records waiting for a retry, the largest group's cause
    and the event id of the record in the middle."""
    with engine.connect() as conn:
        causes, retrying = conn.execute(
            text(
                "SELECT count(DISTINCT cause), count(*) FILTER (WHERE retry_at IS NOT NULL) "
                "FROM inbox_parked WHERE consumer = :c"
            ),
            {"c": CONSUMER},
        ).one()
        cause = conn.execute(
            text(
                "SELECT cause FROM inbox_parked WHERE consumer = :c GROUP BY cause "
                "ORDER BY count(*) DESC, cause LIMIT 1"
            ),
            {"c": CONSUMER},
        ).scalar_one()
        event_id = conn.execute(
            text(
                "SELECT event_id FROM inbox_parked WHERE consumer = :c "
                "ORDER BY id OFFSET :k LIMIT 1"
            ),
            {"c": CONSUMER, "k": parked // 2},
        ).scalar_one()
    return int(causes), int(retrying), str(cause), str(event_id)
