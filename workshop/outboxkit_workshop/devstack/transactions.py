"""Hanging Kafka transactions: found and aborted with Kafka's own tool (KIP-664).

A transaction is *hanging* when a partition holds its records but its coordinator no longer
counts it as ongoing: nothing will ever write its commit or abort marker. The partition's last
stable offset stays below it, so every ``read_committed`` reader of the partition stops there.
Kafka Connect reads its offsets topic that way with exactly-once source on: a worker starting
behind a hanging transaction never finishes starting (its REST calls time out after 90 s) and no
connector runs. A broker stopped while a Connect task's transaction was being written has left
one (Kafka 4.3.1, single broker, graceful stop): the coordinator recorded the transaction as
committed, the partition never got the marker.

The way out is Kafka's ``kafka-transactions.sh find-hanging`` then ``abort``, which write the
missing abort marker. ``find-hanging`` only reports transactions open longer than a maximum
transaction timeout (whole minutes) whose coordinator does not count them as ongoing, so a live
transaction, or one whose markers are still being written, is never touched.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from outboxkit.kernel.retry import wait_until

TOOL = "org.apache.kafka.tools.TransactionsCommand"
# Connect's and Debezium's producers use Kafka's default transaction timeout (60 s): a
# transaction open longer than a minute has outlived any producer that could still end it.
OLDER_THAN_MINUTES = 1


@dataclass(frozen=True)
class Hanging:
    """One hanging transaction, as ``find-hanging`` reports it."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int

    def __str__(self) -> str:
        return (
            f"{self.topic}[{self.partition}] from offset {self.start_offset} "
            f"(producer {self.producer_id}, epoch {self.producer_epoch})"
        )


def parse_hanging(text: str) -> list[Hanging]:
    """The rows of ``find-hanging``'s table (tab-separated, a header line first)."""
    found = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split("\t")]
        if len(cells) < 6 or not cells[1].isdigit():
            continue  # the header, the tool's log lines
        topic, partition, producer, epoch, _coordinator_epoch, start = cells[:6]
        found.append(Hanging(topic, int(partition), int(producer), int(epoch), int(start)))
    return found


class TransactionTool:
    """Kafka's transactions tool, run from the broker's classpath against ``bootstrap``."""

    def __init__(self, java: Path, libs: Path, bootstrap: str, timeout: float = 120) -> None:
        self.java, self.libs, self.bootstrap, self.timeout = java, libs, bootstrap, timeout

    def _run(self, *args: str) -> str:
        argv = [str(self.java), "-cp", f"{self.libs}/*", TOOL]
        argv += ["--bootstrap-server", self.bootstrap, *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"kafka-transactions {args[0]} failed: {' | '.join(tail)}")
        return done.stdout

    def find_hanging(self, older_than_minutes: int = OLDER_THAN_MINUTES) -> list[Hanging]:
        """Hanging transactions on every broker of the cluster."""
        brokers = sorted(_admin(self.bootstrap).list_topics(timeout=10).brokers)
        found: list[Hanging] = []
        for broker in brokers:
            found += parse_hanging(
                self._run(
                    "find-hanging",
                    "--broker-id",
                    str(broker),
                    "--max-transaction-timeout",
                    str(older_than_minutes),
                )
            )
        return found

    def abort(self, hanging: Hanging) -> None:
        """Write the abort marker the transaction never got."""
        self._run(
            "abort",
            "--topic",
            hanging.topic,
            "--partition",
            str(hanging.partition),
            "--start-offset",
            str(hanging.start_offset),
        )


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def offsets(
    admin: AdminClient,
    partitions: Sequence[TopicPartition],
    *,
    latest: bool = True,
    level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> dict[tuple[str, int], int]:
    """Each partition's end (``latest``) or start offset, as a reader at ``level`` sees it:
    read uncommitted, the high watermark; read committed, the last stable offset. Raises
    KafkaException when a partition's leader does not answer."""
    spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    asked = {TopicPartition(tp.topic, tp.partition): spec for tp in partitions}
    futures = admin.list_offsets(asked, isolation_level=level, request_timeout=10)
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}


def open_transactions(bootstrap: str) -> dict[tuple[str, int], int]:
    """Partitions whose last stable offset is below their end, with that offset: the ones a
    ``read_committed`` reader cannot read to the end of now."""
    admin = _admin(bootstrap)
    topics = admin.list_topics(timeout=10).topics
    partitions = [TopicPartition(t, p) for t, meta in topics.items() for p in meta.partitions]
    if not partitions:
        return {}
    stable = offsets(admin, partitions, level=IsolationLevel.READ_COMMITTED)
    end = offsets(admin, partitions)
    return {tp: stable[tp] for tp in stable if stable[tp] < end[tp]}


def heal(
    tool: TransactionTool,
    echo: Callable[[str], None] = print,
    timeout: float = 180,
    poll: float = 5,
) -> list[Hanging]:
    """Wait until every transaction open now has ended, aborting those that hang.

    Run after a broker restart, with the producers of before it stopped: a transaction they left
    open either ends (its coordinator aborts it after its timeout, or a new producer with its
    transactional id fences it) or hangs, and is aborted once it is a minute old. Returns what
    was aborted; raises ``TimeoutError`` if a partition is still held after ``timeout``."""
    started = time.monotonic()

    def left() -> float:
        return max(timeout - (time.monotonic() - started), 0.0)

    def open_now() -> dict[tuple[str, int], int]:
        return wait_until(  # a broker that has just started answers with errors for a moment
            lambda: open_transactions(tool.bootstrap),
            until=lambda _: True,
            timeout=left(),
            poll=1.0,
            ignore=(KafkaException,),
            what="the brokers to list their open transactions",
        )

    held = open_now()
    aborted: list[Hanging] = []
    if held:
        echo(f"kafka      {len(held)} partition(s) behind an open transaction; waiting for them")

    def still_held() -> dict[tuple[str, int], int]:
        nonlocal held
        for hanging in tool.find_hanging():
            tool.abort(hanging)
            aborted.append(hanging)
            echo(f"kafka      aborted a hanging transaction on {hanging}")
        now = open_now()
        held = {tp: lso for tp, lso in held.items() if now.get(tp) == lso}
        return held

    if held:
        wait_until(
            still_held,
            until=lambda partitions: not partitions,
            timeout=left(),
            poll=poll,
            what="every transaction open to end",
            error=TimeoutError,
        )
    return aborted
