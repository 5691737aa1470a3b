"""Strimzi's KafkaConnect (Debezium's Postgres connector and outboxkit's transform, exactly-once
source) and one KafkaConnector per service database, its config built by cdc.config."""

from __future__ import annotations

from typing import Any

from cdc import settings as cdc_settings
from cdc.config import ConnectorSettings, build_connector_config
from cdc.limits import WORKER_SETTINGS
from cdc.settings import CdcSettings, per_database
from cdc.transform import pinned
from outboxkit_workshop.devstack.connect import DIRECTORY_CONFIG_PROVIDER, SECRETS_PROVIDER
from outboxkit_workshop.kubernetes.kafka import (
    API,
    CONNECT_GROUP,
    CONNECT_TOPICS,
    REPLICATION_FACTOR,
)
from outboxkit_workshop.kubernetes.shape import (
    CONNECT_SECRETS_DIR,
    Shape,
    metadata,
    postgres_secret,
)
from outboxkit_workshop.kubernetes.shape import resources as limits

CDC_VOLUME = "cdc-password"


def connector_settings(shape: Shape, service: str) -> ConnectorSettings:
    """The outbox connector of ``service``'s database, built by the code `outboxkit cdc apply`
    runs (`cdc.settings.connector_settings`) and named as the dev stack names it
    (`cdc.settings.per_database`); the CDC password a config-provider reference that Connect
    resolves from the mounted Secret. The settings are the defaults and the shape's choices,
    never the environment of whoever renders."""
    _, key = postgres_secret(shape.cdc_role)
    shared = CdcSettings.model_validate(
        {
            "connect_database_host": shape.database_host,
            "connect_database_port": shape.database_port,
            "cdc_role": shape.cdc_role,
            "cdc_password_reference": f"${{{SECRETS_PROVIDER}:{CONNECT_SECRETS_DIR}:{key}}}",
            "topic_prefix": shape.topic_prefix,
        }
    )
    database = f"postgresql+psycopg://{shape.database_host}:{shape.database_port}/{service}"
    return cdc_settings.connector_settings(per_database(shared, service), database)


def _maven(group: str, artifact: str, version: str) -> dict[str, str]:
    return {"type": "maven", "group": group, "artifact": artifact, "version": version}


def kafka_connect(shape: Shape) -> dict[str, Any]:
    """Two workers in one group. Strimzi builds their image: Debezium's Postgres connector from
    Maven Central at the pom's version, and outboxkit's transform, the jar the wheel ships,
    downloaded from ``shape.transform_url`` and checked against its pinned SHA-512."""
    secret, _ = postgres_secret(shape.cdc_role)
    versions = shape.versions
    config: dict[str, Any] = {
        **{
            f"{topic}.storage.replication.factor": REPLICATION_FACTOR
            for topic in ("config", "offset", "status")
        },
        "key.converter.schemas.enable": False,
        "value.converter.schemas.enable": False,
        "offset.flush.interval.ms": 1000,
        "exactly.once.source.support": "enabled",
        "scheduled.rebalance.max.delay.ms": 10000,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 2000,
        "config.providers": SECRETS_PROVIDER,
        f"config.providers.{SECRETS_PROVIDER}.class": DIRECTORY_CONFIG_PROVIDER,
        f"config.providers.{SECRETS_PROVIDER}.param.allowed.paths": CONNECT_SECRETS_DIR,
        **WORKER_SETTINGS,
    }
    plugins = [
        {
            "name": "debezium-postgres",
            "artifacts": [_maven("io.debezium", "debezium-connector-postgres", versions.debezium)],
        },
        {
            "name": "outboxkit-transform",
            "artifacts": [
                {"type": "jar", "url": shape.transform_url, "sha512sum": pinned()["sha512"]}
            ],
        },
    ]
    return {
        "apiVersion": API,
        "kind": "KafkaConnect",
        "metadata": metadata(
            shape,
            shape.connect_name,
            "connect",
            annotations={"strimzi.io/use-connector-resources": "true"},
        ),
        "spec": {
            "version": versions.kafka,
            "replicas": shape.connect_replicas,
            "bootstrapServers": shape.bootstrap,
            "groupId": CONNECT_GROUP,
            "configStorageTopic": f"{CONNECT_TOPICS}-configs",
            "offsetStorageTopic": f"{CONNECT_TOPICS}-offsets",
            "statusStorageTopic": f"{CONNECT_TOPICS}-status",
            "authentication": {
                "type": "scram-sha-512",
                "username": "connect",
                "passwordSecret": {"secretName": "connect", "password": "password"},
            },
            "config": config,
            "build": {
                "output": {
                    "type": "docker",
                    "image": f"{shape.connect_image}:{versions.debezium}",
                },
                "plugins": plugins,
            },
            "resources": limits("500m", "2Gi", cpu_limit="2"),
            "jvmOptions": {"-Xms": "256m", "-Xmx": "1g"},
            "template": {
                "pod": {"volumes": [{"name": CDC_VOLUME, "secret": {"secretName": secret}}]},
                "connectContainer": {
                    "volumeMounts": [
                        {"name": CDC_VOLUME, "mountPath": CONNECT_SECRETS_DIR, "readOnly": True}
                    ]
                },
            },
        },
    }


def connectors(shape: Shape) -> list[dict[str, Any]]:
    """A KafkaConnector per service database; Strimzi restarts a FAILED connector or task."""
    found = []
    for service in shape.services:
        config: dict[str, Any] = build_connector_config(connector_settings(shape, service))
        meta = metadata(
            shape, config.get("name", connector_settings(shape, service).name), "connect"
        )
        meta["labels"]["strimzi.io/cluster"] = shape.connect_name
        spec = {
            "class": config.pop("connector.class"),
            "tasksMax": int(config.pop("tasks.max")),
            "autoRestart": {"enabled": True},
            "config": config,
        }
        found.append({"apiVersion": API, "kind": "KafkaConnector", "metadata": meta, "spec": spec})
    return found
