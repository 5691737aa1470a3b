"""The operator console (`outboxkit console`): how fast its pages answer over a large backlog of
failures, and what it costs while nobody looks.

The setting: a consumer of one topic of ``partitions`` partitions (64) on the benchmark's own
database, Kafka holding records on every partition (every other partition a few records past
its watermark, so the overview reads the time of the oldest record not applied there), and
``parked`` records (100,000) parked over those partitions, their errors of ``len(ERRORS)`` (20)
kinds with numbers, ids and quoted text that differ from record to record (so they group by the
cause Postgres computes), one in ten waiting for a retry. The rows are made by one INSERT ...
SELECT over generate_series, then vacuumed and analysed, as autovacuum leaves a table of that
size.

The console is built as `outboxkit console` builds it (`build_console`: the job, the stack's
database for the outbox side, its Kafka and Kafka Connect), with the overview's cache off
(``fresh`` = 0) so that every read is a read, and served by uvicorn on a free loopback port.
Measured, ``samples`` times each after ``warm_up`` untimed, the paths taking turns:
`OverviewReader.read()` itself, and with one signed-in HTTP client the overview (GET /), the
failures page (every cause's group over the parked records), the largest group's page and the
search for a parked record's event id. Then the overview's parts, each timed apart as the
reader makes it (the consumer's rows, Kafka's offsets of every partition, the heads of those
behind, the databases, Connect). Every SQL statement the console runs is timed (SQLAlchemy's
cursor events); those of ``slow_ms`` or more at the median are explained (EXPLAIN ANALYZE,
BUFFERS) into the results.

Idle: `outboxkit console` in a process of its own, on the same job (a module written to a
temporary directory) and settings, looked at once (signed in, the overview and the failures
page) and then left alone for ``idle_seconds``: its CPU over that time (/proc, user + system) as
a share of one core, and the queries its database sessions started meanwhile
(pg_stat_activity).

The package: `seed` makes the setting, `measure` times (the paths in turns, the statements, the
overview's parts), `served` serves the app and signs a client in, `idle` runs and watches the
console's own process, `scenario` runs the steps in order (`run`), and `results` checks what the
overview read and shapes the results and their markdown.
"""

from __future__ import annotations

from outboxkit_workshop.bench.operator_console.results import summarise
from outboxkit_workshop.bench.operator_console.scenario import (
    IDLE_SECONDS,
    IDLE_TARGET_PERCENT,
    PARKED,
    PARTITIONS,
    SAMPLES,
    SLOW_MS,
    TARGET_MS,
    WARM_UP,
    run,
)
from outboxkit_workshop.bench.operator_console.seed import ERRORS, Setting

__all__ = [
    "ERRORS",
    "IDLE_SECONDS",
    "IDLE_TARGET_PERCENT",
    "PARKED",
    "PARTITIONS",
    "SAMPLES",
    "SLOW_MS",
    "TARGET_MS",
    "WARM_UP",
    "Setting",
    "run",
    "summarise",
]
