"""Strimzi's Kafka (KRaft, node pools), the outbox topics and a SCRAM user with ACLs per
principal: what deploy/kafka/ (start.sh, init.sh) does for the compose file."""

from __future__ import annotations

from typing import Any

from cdc.limits import BROKER_SETTINGS
from outboxkit_workshop.kubernetes.shape import KAFKA_PORT, Shape, metadata, resources
from outboxkit_workshop.saga import rules

API = "kafka.strimzi.io/v1"
CONNECT_GROUP = "outboxkit-connect"
CONNECT_TOPICS = "_outboxkit-connect"
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
# The topics each service's consumer job reads (deploy/kafka/init.sh grants the same).
READS = rules.READS


def _cluster_label(shape: Shape) -> dict[str, str]:
    return {"strimzi.io/cluster": shape.kafka_name}


def kafka(shape: Shape) -> dict[str, Any]:
    """The Kafka cluster: SCRAM-SHA-512 on the internal listener, simple ACLs, RF 3 and
    min.insync.replicas 2 for every topic, unclean leader election off."""
    config = {
        "default.replication.factor": REPLICATION_FACTOR,
        "min.insync.replicas": MIN_INSYNC_REPLICAS,
        "offsets.topic.replication.factor": REPLICATION_FACTOR,
        "transaction.state.log.replication.factor": REPLICATION_FACTOR,
        "transaction.state.log.min.isr": MIN_INSYNC_REPLICAS,
        "share.coordinator.state.topic.replication.factor": REPLICATION_FACTOR,
        "share.coordinator.state.topic.min.isr": MIN_INSYNC_REPLICAS,
        "unclean.leader.election.enable": False,
        "auto.create.topics.enable": False,
        "num.partitions": 4,
        **{key: int(value) for key, value in BROKER_SETTINGS.items()},
    }
    listener = {
        "name": "scram",
        "port": KAFKA_PORT,
        "type": "internal",
        "tls": False,
        "authentication": {"type": "scram-sha-512"},
    }
    return {
        "apiVersion": API,
        "kind": "Kafka",
        "metadata": metadata(shape, shape.kafka_name, "kafka"),
        "spec": {
            "kafka": {
                "version": shape.versions.kafka,
                "listeners": [listener],
                "authorization": {"type": "simple"},
                "config": config,
            },
            "entityOperator": {"topicOperator": {}, "userOperator": {}},
        },
    }


def node_pool(shape: Shape) -> dict[str, Any]:
    """Three combined broker + controller nodes: one 3-voter quorum."""
    meta = metadata(shape, "combined", "kafka")
    meta["labels"].update(_cluster_label(shape))
    return {
        "apiVersion": API,
        "kind": "KafkaNodePool",
        "metadata": meta,
        "spec": {
            "replicas": shape.kafka_replicas,
            "roles": ["controller", "broker"],
            "storage": {
                "type": "jbod",
                "volumes": [
                    {
                        "id": 0,
                        "type": "persistent-claim",
                        "size": shape.kafka_storage,
                        "deleteClaim": False,
                        "kraftMetadata": "shared",
                    }
                ],
            },
            "resources": resources("500m", "2Gi", cpu_limit="2"),
        },
    }


def topic_name(shape: Shape, aggregate: str) -> str:
    """The outbox topic of an aggregate type."""
    return f"{shape.topic_prefix}{aggregate}"


def topics(shape: Shape) -> list[dict[str, Any]]:
    """The outbox topics, RF 3, created before the connectors write them."""
    found = []
    for aggregate in rules.AGGREGATES:
        meta = metadata(shape, f"outbox-{aggregate}", "kafka")
        meta["labels"].update(_cluster_label(shape))
        spec = {"topicName": topic_name(shape, aggregate), "replicas": REPLICATION_FACTOR}
        found.append({"apiVersion": API, "kind": "KafkaTopic", "metadata": meta, "spec": spec})
    return found


def _acl(kind: str, name: str, pattern: str, *operations: str) -> dict[str, Any]:
    resource = {"type": kind} if kind == "cluster" else {"type": kind, "name": name}
    if kind != "cluster":
        resource["patternType"] = pattern
    return {"resource": resource, "operations": list(operations), "type": "allow"}


_CREATE = ("Write", "Describe", "Create", "DescribeConfigs")


def acls(shape: Shape) -> dict[str, list[dict[str, Any]]]:
    """Each principal's ACLs, as deploy/kafka/init.sh grants them."""
    prefix = shape.topic_prefix
    granted = {
        "connect": [
            _acl("topic", prefix, "prefix", *_CREATE),
            _acl("topic", "__debezium-heartbeat.", "prefix", *_CREATE),
            _acl("topic", CONNECT_TOPICS, "prefix", "Read", *_CREATE),
            _acl("group", CONNECT_GROUP, "literal", "Read", "Describe"),
            _acl("transactionalId", CONNECT_GROUP, "prefix", "Write", "Describe"),
            _acl(
                "transactionalId",
                f"connect-cluster-{CONNECT_GROUP}",
                "literal",
                "Write",
                "Describe",
            ),
            _acl("cluster", "", "", "Describe", "DescribeConfigs", "IdempotentWrite"),
        ],
        "setup": [
            _acl("topic", prefix, "prefix", "Create", "Describe", "DescribeConfigs"),
            _acl("cluster", "", "", "Describe"),
        ],
    }
    for service in shape.services:
        reads = [
            _acl("topic", topic_name(shape, a), "literal", "Read", "Describe")
            for a in READS[service]
        ]
        granted[service] = [
            *reads,
            _acl("group", f"outboxkit-{service}", "prefix", "Read", "Describe"),
            _acl("group", "spark-kafka-source-", "prefix", "Read", "Describe"),
            _acl("group", "outboxkit-metrics", "literal", "Describe"),
        ]
    # The operator console reads the outbox topics (assign(), no commits): Describe on its
    # consumers' groups only for librdkafka's coordinator lookup.
    granted["console"] = [
        _acl("topic", prefix, "prefix", "Read", "Describe"),
        _acl("group", "outboxkit-console", "literal", "Describe"),
        _acl("group", "outboxkit-metrics", "literal", "Describe"),
    ]
    return granted


def users(shape: Shape) -> list[dict[str, Any]]:
    """A SCRAM-SHA-512 KafkaUser per principal; Strimzi's User Operator writes each one's
    password into a Secret of the user's name (key ``password``)."""
    found = []
    for principal, granted in acls(shape).items():
        meta = metadata(shape, principal, "kafka")
        meta["labels"].update(_cluster_label(shape))
        spec = {
            "authentication": {"type": "scram-sha-512"},
            "authorization": {"type": "simple", "acls": granted},
        }
        found.append({"apiVersion": API, "kind": "KafkaUser", "metadata": meta, "spec": spec})
    return found
