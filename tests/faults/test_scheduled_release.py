"""A scheduled message is released once: two `outboxkit outbox release` processes at once, one
of them killed -9 at random moments and started again, and Postgres crashed once mid-way (the
releasers log and retry, they do not exit); a read_committed reader then finds every scheduled
event on its topic, once, and nothing else, and nothing is left pending."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

import outbox
from cdc.config import topic_for
from outbox import scheduled
from outboxkit.kernel.retry import wait_until
from outboxkit.kernel.wire import ID, SOURCE_POSITION
from outboxkit.kernel.wire.record import header_map
from outboxkit_workshop.devstack import faults
from tests.kafka import read_records
from tests.streaming import RESUME_RESENDS

ROOT = Path(__file__).resolve().parents[2]
PER_TRANSACTION = 500  # scheduled per transaction
LEAD = 3.0  # seconds from scheduling to the first message due: the releasers start meanwhile
RETRY_LOGGED = "releasing scheduled messages: "  # what a releaser logs when a pass fails
STARTED = "releasing scheduled messages into the outbox"  # it printed once its signals are set


@dataclass(frozen=True)
class Campaign:
    """``events`` messages due evenly over ``spread`` seconds; a releaser killed every
    ``kill_gap`` seconds (a random one, at a random moment in the range); Postgres crashed when
    ``crash_at`` of the spread has passed."""

    events: int
    spread: float
    kill_gap: tuple[float, float]
    crash_at: float
    seed: int


class Releaser:
    """One `outboxkit outbox release` process in its own process group, its output in a log."""

    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log
        self.started = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._since = 0
        self._out: IO[bytes] | None = None

    def start(self) -> None:
        self._out = self.log.open("ab")
        self._since = self._out.tell()  # where this process's output begins
        command = [sys.executable, "-m", "outboxkit.cli", "outbox", "release", "--url", self.url]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.started += 1

    def kill(self) -> None:
        """kill -9 of its process group, wherever the release pass is."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ready(self) -> bool:
        """Its latest process has set its signal handlers (a SIGTERM before that ends it)."""
        with self.log.open("rb") as log:
            log.seek(self._since)
            return STARTED.encode() in log.read()

    def stop(self) -> int | None:
        """SIGTERM once it runs (it finishes its pass and exits 0), SIGKILL after 15 s; its
        exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            deadline = time.monotonic() + 30  # then SIGTERM all the same: never left running
            while not self.ready() and self.running() and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        if self._out is not None:
            self._out.close()
        return self.process.returncode


def schedule(engine, aggregate_type: str, campaign: Campaign) -> set[str]:
    """The campaign's messages, due from LEAD seconds on; returns their event ids."""
    with engine.connect() as conn:
        first = conn.execute(text("SELECT now()")).scalar_one() + timedelta(seconds=LEAD)
    ids: set[str] = set()
    for start in range(0, campaign.events, PER_TRANSACTION):
        numbers = range(start, min(start + PER_TRANSACTION, campaign.events))
        events = [
            outbox.NewEvent(aggregate_type, f"agg-{n % 32}", "Due", {"n": n}) for n in numbers
        ]
        dues = [
            scheduled.due_of(first + timedelta(seconds=campaign.spread * n / campaign.events), None)
            for n in numbers
        ]
        with Session(engine) as session, session.begin():
            ids |= {str(e.event_id) for e in outbox.UnitOfWork(session).schedule_many(events, dues)}
    return ids


def strike(stack, engine, releasers: list[Releaser], campaign: Campaign) -> int:
    """Kill -9 a random releaser (started again at once) every ``kill_gap`` seconds until the
    last message is due, and crash Postgres once at ``crash_at``; returns the kills."""
    rng = random.Random(campaign.seed)
    began = time.monotonic()
    end = began + LEAD + campaign.spread
    crash_at = began + LEAD + campaign.crash_at * campaign.spread
    kills, crashed = 0, False
    while time.monotonic() < end:
        time.sleep(rng.uniform(*campaign.kill_gap))
        if not crashed and time.monotonic() >= crash_at:
            # Immediate shutdown (no checkpoint; crash recovery on start), 3 s down.
            faults.restart(stack, stack.state.postgres.nodes[0], 3, signal.SIGQUIT)
            engine.dispose()  # the pool's connections died with the server
            print(f"crashed Postgres at {time.monotonic() - began:.1f} s")
            crashed = True
            continue
        victim = releasers[rng.randrange(len(releasers))]
        assert victim.running(), f"a releaser exited by itself: {victim.log.read_text()[-2000:]}"
        victim.kill()
        victim.start()
        kills += 1
    assert crashed, "the campaign ended before the crash point"
    return kills


def check_released_once(stack, aggregate_type: str, ids: set[str]) -> int:
    """Every id on the topic, each written by the releasers once (one source position), and
    nothing else; returns the copies a read_committed reader saw beyond one per id."""
    records = read_records(
        stack.bootstrap_servers(),
        [topic_for(aggregate_type, topic_prefix=stack.settings.topic_prefix)],
        until=lambda got: len({header_map(r.headers)[ID] for r in got}) >= len(ids),
        timeout=240,
    )
    seen: Counter[str] = Counter()
    positions: defaultdict[str, set[str]] = defaultdict(set)
    for record in records:
        headers = header_map(record.headers)
        seen[headers[ID]] += 1
        positions[headers[ID]].add(headers[SOURCE_POSITION])
    assert set(seen) == ids  # none lost, nothing else
    written_twice = [i for i, found in positions.items() if len(found) > 1]
    assert written_twice == []  # no message released twice
    return sum(seen.values()) - len(seen)


def run_campaign(stack, engine, aggregate_type: str, tmp_path: Path, campaign: Campaign) -> None:
    url = stack.database_url()
    releasers = [Releaser(url, tmp_path / f"releaser-{n}.log") for n in range(2)]
    began = time.monotonic()
    for releaser in releasers:
        releaser.start()
    try:
        ids = schedule(engine, aggregate_type, campaign)
        kills = strike(stack, engine, releasers, campaign)
        wait_until(
            lambda: scheduled.pending(engine)["pending"] == 0,
            timeout=120,
            what="every scheduled message released",
        )
        assert all(r.running() for r in releasers), "a releaser exited by itself"
    finally:
        codes = [r.stop() for r in releasers]  # stop() leaves none running, ready or not
    released_at = time.monotonic() - began
    logs = "".join(r.log.read_text(errors="replace") for r in releasers)
    assert codes == [0, 0], logs[-3000:]  # each stopped by its PID, cleanly
    assert RETRY_LOGGED in logs, logs[-3000:]  # the crash was logged and retried
    again = check_released_once(stack, aggregate_type, ids)
    print(
        f"{campaign.events} scheduled over {campaign.spread:g} s, {kills} kill -9 of a releaser "
        f"({sum(r.started for r in releasers)} processes in all), one Postgres crash: all "
        f"released in {released_at:.1f} s, each once; {again} resent by Debezium on resuming "
        f"(seed {campaign.seed})"
    )
    # The only copies allowed are Debezium's re-emission of the events of the source transaction
    # around its stored position when it resumes after the crash (tests/streaming.py): the same
    # outbox write read twice, which check_released_once tells from a second release.
    assert again <= RESUME_RESENDS


def test_two_releasers_killed_and_a_postgres_crash_release_each_message_once(
    stack, engine, aggregate_type, tmp_path
):
    """3,000 messages due over 12 s, a releaser killed -9 every 1-2.5 s, Postgres crashed at
    40% of the spread."""
    campaign = Campaign(3000, 12.0, (1.0, 2.5), 0.4, seed=time.time_ns())
    run_campaign(stack, engine, aggregate_type, tmp_path, campaign)


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_repeated_releaser_kills_and_a_postgres_crash_release_each_message_once(
    stack, engine, aggregate_type, tmp_path, round_
):
    """10,000 messages due over 40 s, a releaser killed -9 every 0.3-1.5 s, Postgres crashed at
    a random point of the spread."""
    rng = random.Random(round_)
    campaign = Campaign(10_000, 40.0, (0.3, 1.5), rng.uniform(0.2, 0.8), seed=round_)
    run_campaign(stack, engine, aggregate_type, tmp_path, campaign)
