"""`Harness`: a user's services and consumer jobs in one process, on a real Postgres, with no
Kafka, Connect or Spark: the events the services and handlers commit are captured from the
database, turned into the records the connector would write and applied through each job's
real inbox."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from inbox.apply import Inbox
from inbox.operations import list_parked
from inbox.redrives import retry_due
from inbox.tables import ledger
from migrations.runner import FRAMEWORK, Migrations
from outbox import at_commit, scheduled
from outbox.publish import Outbox
from outboxkit.kernel.engines import engine_for
from outboxkit.kernel.envelope import Envelope
from outboxkit.kernel.wire.record import DEFAULT_TOPIC_PREFIX, KafkaRecord
from outboxkit.testing import build, capture, database
from outboxkit.testing.build import HarnessError, JobSource, ServiceSource
from outboxkit.testing.delivery import Consumer, Delivery, Drop, deliver, replay
from outboxkit.testing.topics import DEFAULT_PARTITIONS, Match, TopicLog

DEFAULT_MAX_ROUNDS = 200


class Harness:
    """Runs services (FastAPI apps of `service_template.create_app`) and consumer jobs against
    one Postgres database, delivering every committed event to the jobs that read its topic.

    Use it as a context manager: entering migrates the database (the framework's chain, the
    services' own, then ``migrations``), installs the capture trigger and starts each app's
    `TestClient`; leaving stops them, and drops the database when the harness made it.

    Args:
        database_url: The database to run on; with ``fresh_database``, any database of the
            server, on which a new one is made and dropped at exit.
        services: Apps, or factories of apps (``orders.app``).
        jobs: `spark_consumers.Job` objects, factories of them, or ``module:attribute``.
            Each applies to the harness's database, whatever its ``database_url`` says.
        env_prefixes: The environment prefixes the factories read their settings from
            (``ORDERS_``): the harness sets their database, Kafka, topic prefix and outbox
            while it calls them (`outboxkit.testing.build`).
        migrations: More migration chains to run, after the services' (e.g. the tables of a
            handler under test that belongs to no service).
        fresh_database: Run on a new database of the server, copied from a template migrated
            once per process, and drop it at exit.
        partitions: Partitions per topic; a record's is a stable hash of its key.
        topic_prefix: The connector's topic prefix, which the jobs' topics must start with.
        max_rounds: Rounds `settle` runs before it gives up (a handler publishing forever).
    """

    def __init__(
        self,
        database_url: str,
        *,
        services: Sequence[ServiceSource] = (),
        jobs: Sequence[JobSource] = (),
        env_prefixes: Sequence[str] = (),
        migrations: Sequence[Migrations] = (),
        fresh_database: bool = False,
        partitions: int = DEFAULT_PARTITIONS,
        topic_prefix: str = DEFAULT_TOPIC_PREFIX,
        max_rounds: int = DEFAULT_MAX_ROUNDS,
    ) -> None:
        if partitions < 1 or max_rounds < 1:
            raise ValueError("a harness needs partitions >= 1 and max_rounds >= 1")
        self.database_url = database.fresh_url(database_url) if fresh_database else database_url
        self._sources, self._job_sources = tuple(services), tuple(jobs)
        self._env_prefixes, self._migrations = tuple(env_prefixes), tuple(migrations)
        self._fresh, self.max_rounds = fresh_database, max_rounds
        self.log = TopicLog(partitions, topic_prefix)
        self.deliveries: list[Delivery] = []
        self._captured: list[capture.Captured] = []
        self._holds: list[Match] = []
        self._drops: list[Drop] = []
        self._clients: dict[str, TestClient] = {}
        self._consumers: list[Consumer] = []
        self._offset = timedelta()
        self._closing = contextlib.ExitStack()

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> Harness:
        try:
            self._start()
        except BaseException:
            self._closing.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._closing.close()

    def _start(self) -> None:
        env = build.settings_env(self._env_prefixes, self.database_url, self.log.topic_prefix)
        with build.environment(env):
            apps = [build.service(source) for source in self._sources]
            jobs = [build.job(source) for source in self._job_sources]
        chains: dict[str, Migrations] = {FRAMEWORK.version_table: FRAMEWORK}
        for app in apps:
            chains |= {m.version_table: m for m in app.state.service.migrations}
        chains |= {m.version_table: m for m in self._migrations}
        if self._fresh:
            database.create_fresh(self.database_url, list(chains.values()))
            self._closing.callback(database.drop, self.database_url)
        else:
            database.migrate(self.database_url, list(chains.values()))
        self.engine: Engine = at_commit.attach(engine_for(self.database_url, "consumer"))
        self._closing.callback(self.engine.dispose)
        self._seen = capture.install(self.engine)
        for job in jobs:
            if not any(t.startswith(self.log.topic_prefix) for t in job.topics):
                raise HarnessError(
                    f"job {job.name} reads {', '.join(job.topics)}, none of them under the "
                    f"harness's topic prefix {self.log.topic_prefix!r}: give the harness the "
                    "jobs' prefix (topic_prefix=...)"
                )
            self._consumers.append(Consumer(job, job.inbox(self.engine)))
        for app in apps:
            name = app.state.service.settings.name
            if name in self._clients:
                raise HarnessError(f"two services are named {name!r}: name each one its own")
            self._closing.callback(app.state.service.engine.dispose)
            self._clients[name] = self._closing.enter_context(TestClient(app))

    # -- the services and the consumers -------------------------------------------------------

    def client(self, service: str) -> TestClient:
        """The `TestClient` of the service named ``service`` (its settings' ``name``).

        Args:
            service: The service's name.
        """
        if service not in self._clients:
            raise HarnessError(f"no service {service!r}; the harness runs {sorted(self._clients)}")
        return self._clients[service]

    def inbox(self, consumer: str) -> Inbox:
        """The inbox of the job whose consumer is ``consumer`` (to redrive, say).

        Args:
            consumer: The job's consumer name.
        """
        for each in self._consumers:
            if each.name == consumer:
                return each.inbox
        raise HarnessError(f"no consumer {consumer!r}; the harness runs {self._names()}")

    # -- delivery and time --------------------------------------------------------------------

    def settle(self) -> int:
        """Release the scheduled messages due by the harness clock, redrive the delayed retries
        due, capture what was committed and deliver it, until a round finds nothing to do; the
        number of slices handed to the inboxes.

        Raises:
            HarnessError: Still busy after ``max_rounds`` rounds.
        """
        slices = 0
        for _ in range(self.max_rounds):
            busy = self._release() + self._retry() + self._capture()
            done = deliver(self.log, self._consumers, self._holds, self._drops)
            self.deliveries += done
            slices += len(done)
            if not busy and not done:
                return slices
        raise HarnessError(
            f"not settled after {self.max_rounds} rounds: do handlers publish events that "
            "make each other publish again, forever? (max_rounds=...)"
        )

    def advance(
        self, *, seconds: float = 0, minutes: float = 0, hours: float = 0, days: float = 0
    ) -> int:
        """Move the harness clock forward, then `settle`: scheduled messages and delayed
        retries due by the new time are released and delivered.

        Args:
            seconds: Seconds to move forward (added to the others).
            minutes: Minutes to move forward.
            hours: Hours to move forward.
            days: Days to move forward.
        """
        step = timedelta(seconds=seconds, minutes=minutes, hours=hours, days=days)
        if step < timedelta():
            raise ValueError("the harness clock only moves forward")
        self._offset += step
        capture.set_offset(self.engine, self._offset)
        return self.settle()

    def now(self) -> datetime:
        """The harness clock: the database's clock plus every `advance` so far."""
        return capture.clock(self.engine)

    # -- faults -------------------------------------------------------------------------------

    def hold(self, **match: Any) -> Match:
        """Hold back the records that `Match` ``match`` (``topic=``, ``event_type=``, ``key=``,
        ``event_id=``, ``consumer=``), and the records behind each in its partition, until
        `release_held`: the other partitions and topics are delivered first."""
        held = Match(**match)
        self._holds.append(held)
        return held

    def release_held(self) -> int:
        """Lift every hold, then `settle`."""
        self._holds.clear()
        return self.settle()

    def drop(self, *, times: int = 1, **match: Any) -> None:
        """Lose the next ``times`` slices holding a record that matches (as a task that died
        before its transaction committed): the consumer reads them again on the next round.

        Args:
            times: How many slices to lose.
            **match: What the records must match (`Match`'s fields).
        """
        self._drops.append(Drop(Match(**match), times))

    def redeliver(self, *, new_offset: bool = False, **match: Any) -> int:
        """Deliver the matching records again, then `settle`; how many records. At their
        offsets (a replay: a consumer restarted from an older checkpoint), to each consumer
        that read them; or, with ``new_offset``, written again at the end of their partitions
        (a connector's re-send after a restart), for every consumer of the topic.

        Args:
            new_offset: Write them again at new offsets instead of replaying the old ones.
            **match: What the records must match (`Match`'s fields).
        """
        wanted = Match(**match)
        found = [r for r in self.log.all() if wanted.matches(r)]
        for record in found:
            if new_offset:
                self.log.resend(record)
                continue
            for consumer in self._consumers:
                if wanted.matches(record, consumer.name) and consumer.has_read(record):
                    self.deliveries.append(replay(consumer, record))
        self.settle()
        return len(found)

    # -- what happened ------------------------------------------------------------------------

    def published(
        self,
        *,
        event_type: str | None = None,
        aggregate_type: str | None = None,
        key: str | None = None,
    ) -> list[Envelope]:
        """The events committed since the harness started, in commit order (captured at the
        latest `settle`), those matching the arguments given.

        Args:
            event_type: Only events of this type; None: any.
            aggregate_type: Only events of this aggregate type; None: any.
            key: Only events of this aggregate id; None: any.
        """
        return [
            e
            for e in capture.envelopes(self._captured)
            if (event_type is None or e.event_type == event_type)
            and (aggregate_type is None or e.aggregate_type == aggregate_type)
            and (key is None or e.aggregate_id == key)
        ]

    def records(self, topic: str | None = None) -> list[KafkaRecord]:
        """The records written, as a consumer reads them (of ``topic``, or all).

        Args:
            topic: Only this topic's records; None: all.
        """
        return [r for r in self.log.all() if topic is None or r.topic == topic]

    def actions(self, consumer: str | None = None) -> Counter[str]:
        """What the inboxes did with the records delivered (``apply``, ``skip_replay``,
        ``skip_duplicate``, ``park``, ``hold``, ...), summed over the deliveries.

        Args:
            consumer: Only this consumer's deliveries; None: all.
        """
        total: Counter[str] = Counter()
        for each in self.deliveries:
            if each.result is not None and consumer in (None, each.consumer):
                total.update({a.value: n for a, n in each.result.counts.items()})
        return total

    def applied(self, consumer: str | None = None) -> Counter[tuple[str, str]]:
        """How many times each event was applied, by (consumer, event id), from the inbox
        ledger (what committed, redrives and retries included).

        Args:
            consumer: Only this consumer's; None: every consumer's.
        """
        query = select(ledger.c.consumer, ledger.c.event_id, func.count()).group_by(
            ledger.c.consumer, ledger.c.event_id
        )
        if consumer is not None:
            query = query.where(ledger.c.consumer == consumer)
        with self.engine.connect() as conn:
            return Counter({(c, str(e)): n for c, e, n in conn.execute(query)})

    def parked(self, consumer: str | None = None) -> list[dict[str, Any]]:
        """The records parked now (readable copies, with the reason), oldest first.

        Args:
            consumer: Only this consumer's; None: every consumer's.
        """
        return list_parked(self.engine, consumer, limit=10_000)

    def assert_applied_once(self) -> None:
        """Raise AssertionError, listing each, unless every event published was applied
        exactly once by every job that reads its topic and nothing is parked."""
        applied = self.applied()
        problems = []
        for event in self.published():
            topic = self.log.topic_prefix + event.aggregate_type
            for consumer in self._consumers:
                count = applied[(consumer.name, str(event.event_id))]
                if consumer.reads(topic) and count != 1:
                    problems.append(
                        f"{consumer.name}: {event.event_type} {event.event_id} (key "
                        f"{event.aggregate_id}) applied {count} times"
                    )
        problems += [
            f"{p['consumer']}: {p['event_type']} (key {p['key']}) parked: {p['error']}"
            for p in self.parked()
        ]
        if problems:
            raise AssertionError("not applied once:\n" + "\n".join(problems))

    # -- one round's steps --------------------------------------------------------------------

    def _release(self) -> int:
        write = Outbox(mode="delete").release_writer()
        return scheduled.release_due(self.engine, write, now=self.now()).count

    def _retry(self) -> int:
        now, done = self.now(), 0
        for consumer in self._consumers:
            result = retry_due(consumer.inbox, now=now)
            done += result.applied + result.skipped
        return done

    def _capture(self) -> int:
        with self.engine.connect() as conn:
            found = capture.captured_after(conn, self._seen)
        for row in found:
            self.log.write(row)
            self._seen = row.seq
        self._captured += found
        return len(found)

    def _names(self) -> list[str]:
        return [c.name for c in self._consumers]
