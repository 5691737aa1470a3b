"""The network faults on the partitionable cluster: the saga runs with two replicas of each
service while partitions strike (a partition leader or the active controller cut from the other
brokers, a leader deaf one way, the Connect worker running a task cut from Kafka, the workers
split, the consumers' commit in doubt, a service replica cut from Postgres, a slow and lossy
link between the consumers and Kafka) and a Spark executor and a Spark worker are killed; then
every order is final, every invariant and the audit hold, a read_committed reader sees each
event id once, and no link is left cut. A campaign (``--slow``); the default run strikes the
outbox's path on its own (test_pipeline_partitions.py). Needs root (each node in a network
namespace of its own); skipped elsewhere."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from outboxkit_workshop.devstack.network import unavailable
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.saga_harness import chaos, partitions
from outboxkit_workshop.saga_harness.faults import NETWORK_KINDS
from outboxkit_workshop.saga_harness.processes import Saga
from tests.e2e.conftest import running_saga

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

# Every network kind, and the two Spark process kinds (a worker lost with its executors, one
# executor lost) mixed in.
KINDS = [kind.name for kind in NETWORK_KINDS] + ["spark-executor-kill", "spark-worker-kill"]


@pytest.fixture(scope="module")
def cluster_saga(cluster: Stack) -> Iterator[Saga]:
    with running_saga(cluster, "cluster saga", replicas=2) as run:
        yield run


# Each round cut 11-13 s and then recovered, after the saga's start on the cluster.
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_partitions_keep_every_invariant(cluster_saga, cluster, monkeypatch):
    # Shorter than a campaign's cuts (10-20 s, a slow link 30-45 s): long enough for every
    # timeout that decides (a broker fenced after 6 s, a Connect worker after 10 s).
    monkeypatch.setattr(partitions, "CUT_SECONDS", (11.0, 13.0))
    monkeypatch.setattr(partitions, "SLOW_SECONDS", (15.0, 20.0))
    campaign = chaos.run(
        cluster,
        cluster_saga,
        rounds=len(KINDS),
        orders=240,
        rate=3,
        seed=11,
        gap=(1, 2),
        kinds=KINDS,
        supervise=False,  # the cluster's fixture runs the supervisor
    )
    for r in campaign.rounds:
        print(f"round {r.number} {r.fault} on {r.struck}: recovered in {r.recovery:.1f}s")
    print({k: v for k, v in campaign.as_dict().items() if k not in ("rounds", "audits")})
    assert sorted(r.fault for r in campaign.rounds) == sorted(KINDS)
    assert campaign.stuck == 0
    assert (campaign.lost, campaign.duplicates) == (0, 0)
    assert campaign.kafka_duplicates == 0 and campaign.kafka_records > 0
    assert campaign.problems == []
    assert campaign.report_ok
    network = cluster.network()
    assert network is not None and network.rules == [] and network.shapers == {}
