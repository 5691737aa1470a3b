"""What the jobs' topics are now, read on the driver: the cluster's id and each topic's id
(KIP-516), which change when a topic is re-created or the jobs move to another cluster; and
what the driver does about partitions whose offsets moved, before a query starts."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inbox import moves
from inbox.position import TopicIdentity
from outboxkit.kernel.kafka.security import client_config
from spark_consumers.job import Job, query_name

log = logging.getLogger(__name__)

ADMIN_TIMEOUT_SECONDS = 10.0


class JobStopped(RuntimeError):
    """A partition of a job is stopped and only an operator can start it over."""


class TopicIdentities:
    """Reads the identity of a set of topics from the jobs' cluster (one admin client, kept)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._config = dict(config)  # a confluent-kafka client's
        self._admin: Any = None

    @classmethod
    def of(cls, job: Job) -> TopicIdentities:
        """The identities of ``job``'s cluster, as its clients reach it."""
        return cls(client_config(job.bootstrap_servers, job.kafka_security, job.kafka_options))

    def read(self, topics: Sequence[str]) -> dict[str, TopicIdentity]:
        """Each existing topic's identity (a topic that does not exist yet is left out)."""
        from confluent_kafka import KafkaException, TopicCollection
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(self._config)
        admin = self._admin
        cluster = admin.describe_cluster(request_timeout=ADMIN_TIMEOUT_SECONDS)
        described = admin.describe_topics(
            TopicCollection(list(topics)), request_timeout=ADMIN_TIMEOUT_SECONDS
        )
        # The wait outlasts the request's own timeout, so an unreachable cluster ends in
        # librdkafka's KafkaException (with its reason), not in a bare TimeoutError.
        cluster_id = str(cluster.result(timeout=ADMIN_TIMEOUT_SECONDS + 5).cluster_id)
        found: dict[str, TopicIdentity] = {}
        for topic, future in described.items():
            try:
                found[topic] = TopicIdentity(cluster_id, str(future.result().topic_id))
            except KafkaException:  # unknown topic: it may appear later
                continue
        return found


# A query's start-over counts: job name -> (topic, partition) -> epoch (`inbox.moves.epochs`).
Epochs = dict[str, dict[tuple[str, int], int]]


def prepare_start(
    jobs: Sequence[Job], identities: Mapping[str, TopicIdentity], checkpoint: Path
) -> Epochs:
    """Before a query of ``jobs`` starts: partitions whose topic changed identity and whose
    sources have positions are started over; a partition only an operator can start over
    raises `JobStopped`. The query's Spark checkpoint is moved aside when its offsets belong
    to other topic identities or start-overs than today's, so it starts from the inbox's
    positions. Returns the partitions' start-over counts, which the query's slices carry."""
    epochs: Epochs = {}
    for job in jobs:
        engine = job.engine("once")
        try:
            for move in moves.moved(engine, job.consumer, identities, job.topics):
                if not move.automatic:
                    raise JobStopped(
                        f"job {job.name}: {move.topic}[{move.partition}] is stopped: "
                        f"{move.describe()}. See the runbook 'When offsets change': "
                        f"outboxkit inbox rebase --consumer {job.consumer} --topic {move.topic}"
                    )
                moves.start_over(engine, move)
                log.warning(
                    "job %s: %s[%d] started over from its start (%s); its sources' positions "
                    "decide what was applied",
                    job.name,
                    move.topic,
                    move.partition,
                    move.describe(),
                )
            epochs[job.name] = moves.epochs(engine, job.consumer, job.topics)
        finally:
            engine.dispose()
    _checkpoint_for(checkpoint, identities, epochs, jobs)
    return epochs


def _moved(before: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether a checkpoint noted with ``before`` holds offsets of other topic incarnations or
    start-overs than ``now``. A start-over count missing from ``before`` was 0 (a partition
    without its row when the query started: its first count), so a rewind or start-over of a
    partition first applied by that query is noticed too; a topic missing from it is new."""
    identities = any(k in now and now[k] != v for k, v in before.items() if "/" not in k)
    counts = any(v != before.get(k, 0) for k, v in now.items() if "/" in k)
    return identities or counts


def _checkpoint_for(
    checkpoint: Path, identities: Mapping[str, TopicIdentity], epochs: Epochs, jobs: Sequence[Job]
) -> None:
    """Move the query's checkpoint aside when it was made for other topic identities or
    start-overs than today's, and record today's beside it (written whole, then renamed)."""
    name = query_name(jobs)
    folder = checkpoint / name
    noted = checkpoint / f"{name}.topics.json"
    now = {
        **{t: [i.cluster_id, i.topic_id] for t, i in sorted(identities.items())},
        **{
            f"{job}/{topic}/{partition}": epoch
            for job, found in sorted(epochs.items())
            for (topic, partition), epoch in sorted(found.items())
        },
    }
    before = json.loads(noted.read_text()) if noted.exists() else {}
    if _moved(before, now) and folder.exists():
        aside = checkpoint / f"{name}.moved-{time.strftime('%Y%m%dT%H%M%S')}"
        shutil.move(str(folder), str(aside))
        log.warning(
            "query %s: its checkpoint's offsets belong to other topics (re-created, another "
            "cluster, or started over): moved to %s; the query starts from the inbox's positions",
            name,
            aside,
        )
    checkpoint.mkdir(parents=True, exist_ok=True)
    partial = noted.with_name(noted.name + ".partial")
    partial.write_text(json.dumps({**before, **now}, indent=1) + "\n")
    partial.replace(noted)
