"""What the manifests are rendered from: one frozen `Shape`, and the names derived from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from outboxkit import __version__
from outboxkit_workshop.devstack.artifacts import pinned_versions
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.saga.common import SERVICES

# The Strimzi and Spark operator releases whose custom resources are rendered (their API
# versions: kafka.strimzi.io/v1, sparkoperator.k8s.io/v1beta2).
STRIMZI_VERSION = "1.2.0"
SPARK_OPERATOR_VERSION = "2.5.2"
# Strimzi mounts additional volumes only under /mnt.
CONNECT_SECRETS_DIR = "/mnt/outboxkit-secrets"
SECRETS_DIR = "/run/secrets"
SERVICE_PORT = 8000
METRICS_PORT = 9400
KAFKA_PORT = 9092


def _stack_default(name: str) -> Any:
    """A default of the stack's settings: the connectors and roles are named as `outboxkit
    saga prepare` names them."""
    return StackSettings.model_fields[name].default


@dataclass(frozen=True)
class Shape:
    """The deployment's choices; every manifest is a pure function of it."""

    namespace: str = "outboxkit"
    image: str = f"outboxkit:{__version__}"
    service_replicas: int = 2
    service_workers: int = 2
    kafka_name: str = "outboxkit"
    kafka_replicas: int = 3
    kafka_storage: str = "20Gi"
    connect_replicas: int = 2
    connect_image: str = "registry.example.com/outboxkit/connect"
    transform_url: str = "https://artifacts.example.com/outboxkit/outboxkit-smt-1.jar"
    database_host: str = "postgres"
    database_port: int = 5432
    spark_executors: int = 2
    checkpoint_storage: str = "1Gi"
    trigger_seconds: int = 1
    topic_prefix: str = field(default_factory=lambda: str(_stack_default("topic_prefix")))
    services: tuple[str, ...] = tuple(SERVICES)

    @property
    def versions(self) -> Any:
        """The pins of cdc/java/pom.xml (Kafka, Debezium, Spark)."""
        return pinned_versions()

    @property
    def bootstrap(self) -> str:
        """The Kafka bootstrap address Strimzi gives the internal SCRAM listener."""
        return f"{self.kafka_name}-kafka-bootstrap:{KAFKA_PORT}"

    @property
    def connect_name(self) -> str:
        """The KafkaConnect cluster (its REST service: <name>-connect-api)."""
        return f"{self.kafka_name}-connect"

    @property
    def cdc_role(self) -> str:
        """The Postgres role the connectors log in as."""
        return str(_stack_default("cdc_role"))


def labels(component: str, **extra: str) -> dict[str, str]:
    """The labels of every object of one component."""
    return {"app.kubernetes.io/part-of": "outboxkit", "app.kubernetes.io/name": component, **extra}


def metadata(shape: Shape, name: str, component: str, **extra: Any) -> dict[str, Any]:
    """An object's metadata in the shape's namespace."""
    return {"name": name, "namespace": shape.namespace, "labels": labels(component), **extra}


def resources(cpu: str, memory: str, cpu_limit: str | None = None) -> dict[str, Any]:
    """Requests and limits (memory limited at its request: no overcommit of the heap)."""
    return {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": cpu_limit or cpu, "memory": memory},
    }


# Secrets created out of band (deploy/kubernetes/README.md): name -> the key (file) it holds.
def postgres_secret(role: str) -> tuple[str, str]:
    """The Secret holding a Postgres role's password, and its key."""
    return f"outboxkit-db-{role.replace('_', '-')}", f"{role}.password"
