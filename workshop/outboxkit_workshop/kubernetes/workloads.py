"""The services (Deployments behind Services, with probes, limits and disruption budgets), the
set-up Job (`outboxkit dev saga prepare`), the operator console, and what they share: a
ServiceAccount, a ConfigMap of client settings, and Secrets mounted as files (names only: the
values are created elsewhere)."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from outboxkit_workshop.kubernetes.shape import (
    CONNECT_SECRETS_DIR,
    SECRETS_DIR,
    SERVICE_PORT,
    Shape,
    labels,
    metadata,
    postgres_secret,
    resources,
)
from outboxkit_workshop.saga import rules

ACCOUNT = "outboxkit"
CLIENT_CONFIG = "outboxkit-client"
SETUP = "outboxkit-setup"
CONSOLE = "console"
# The Secret of the console's users file and session key (created out of band; not "console",
# which Strimzi's User Operator writes for the KafkaUser of that name).
CONSOLE_SECRET = "outboxkit-console"
CONSOLE_PORT = 8089

# The image's user and group (deploy/Dockerfile: useradd --uid 10001 --user-group).
IMAGE_UID = 10001


def pod_security() -> dict[str, Any]:
    """A pod's security context: the image's user by number (runAsNonRoot cannot verify a user
    name), and its group as the group of the secret files, which are root's otherwise and
    mounted 0440: the image's user reads them through the group."""
    return {
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "runAsGroup": IMAGE_UID,
        "fsGroup": IMAGE_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def service_account(shape: Shape) -> dict[str, Any]:
    """The pods' identity; no API token mounted (none of them calls the Kubernetes API)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(shape, ACCOUNT, "outboxkit"),
        "automountServiceAccountToken": False,
    }


def client_config(shape: Shape) -> dict[str, Any]:
    """Settings every Python process shares: Kafka client security, where traces go."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(shape, CLIENT_CONFIG, "outboxkit"),
        "data": {
            "OUTBOXKIT_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "OUTBOXKIT_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        },
    }


def secret_files(files: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """One projected volume: file name -> (Secret, key), every file under /run/secrets."""
    sources = [
        {"secret": {"name": secret, "items": [{"key": key, "path": file}]}}
        for file, (secret, key) in files.items()
    ]
    return {"name": "secrets", "projected": {"sources": sources, "defaultMode": 0o440}}


def service_secrets(service: str) -> dict[str, tuple[str, str]]:
    """A service's files: its database role's password and its Kafka user's."""
    return {
        f"{service}.password": postgres_secret(service),
        f"kafka-{service}.password": (service, "password"),
    }


def service_env(shape: Shape, service: str) -> list[dict[str, str]]:
    """What settings_of(service) reads, as the compose file gives it."""
    prefix = service.upper()
    values = {
        f"{prefix}_DATABASE_URL": (
            f"postgresql+psycopg://{service}@{shape.database_host}:{shape.database_port}/{service}"
        ),
        f"{prefix}_DATABASE_PASSWORD_FILE": f"{SECRETS_DIR}/{service}.password",
        f"{prefix}_KAFKA_BOOTSTRAP_SERVERS": shape.bootstrap,
        f"{prefix}_TOPIC_PREFIX": shape.topic_prefix,
        f"{prefix}_EXACTLY_ONCE_SOURCE": "true",
        f"{prefix}_OUTBOX__MODE": "delete",
        # Each aggregate type only from the connector of the service that publishes it.
        f"{prefix}_PUBLISHERS": json.dumps(rules.publishers(service, partial(_source, shape))),
        "OUTBOXKIT_KAFKA_SASL_USERNAME": service,
        "OUTBOXKIT_KAFKA_SASL_PASSWORD_FILE": f"{SECRETS_DIR}/kafka-{service}.password",
        "OTEL_SERVICE_NAME": service,
    }
    return [{"name": name, "value": value} for name, value in values.items()]


def _source(shape: Shape, service: str) -> str:
    """The source name of ``service``'s connector (its server name, as the render names it)."""
    from outboxkit_workshop.kubernetes.connect import connector_settings

    return connector_settings(shape, service).server_name


def _probe(path: str, period: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": 3,
    }


def _pod(shape: Shape, containers: list[dict[str, Any]], files: dict[str, Any]) -> dict[str, Any]:
    return {
        "serviceAccountName": ACCOUNT,
        "automountServiceAccountToken": False,
        "securityContext": pod_security(),
        "containers": containers,
        "volumes": [secret_files(files)],
    }


def _container(shape: Shape, name: str, command: list[str], env: list[Any]) -> dict[str, Any]:
    return {
        "name": name,
        "image": shape.image,
        "command": command,
        "env": env,
        "envFrom": [{"configMapRef": {"name": CLIENT_CONFIG}}],
        "volumeMounts": [{"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def deployment(shape: Shape, service: str) -> dict[str, Any]:
    """A service's replicas: uvicorn on the app factory, ready while /ready answers 200."""
    command = [
        "uvicorn",
        f"outboxkit_workshop.saga.{service}:app",
        "--factory",
        "--host",
        "0.0.0.0",
    ]
    command += ["--port", str(SERVICE_PORT), "--workers", str(shape.service_workers)]
    container = _container(
        shape, service, [*command, "--no-access-log"], service_env(shape, service)
    )
    container["ports"] = [{"name": "http", "containerPort": SERVICE_PORT}]
    container["readinessProbe"] = _probe("/ready", 10)
    container["livenessProbe"] = {**_probe("/health", 15), "initialDelaySeconds": 30}
    container["resources"] = resources("250m", "512Mi", cpu_limit="1")
    return _deployment(shape, service, shape.service_replicas, container, service_secrets(service))


def _deployment(
    shape: Shape, name: str, replicas: int, container: dict[str, Any], files: dict[str, Any]
) -> dict[str, Any]:
    """A Deployment of ``replicas`` pods of ``container``, with the secret ``files``."""
    selector = labels(name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(shape, name, name),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": _pod(shape, [container], files),
            },
        },
    }


def service(shape: Shape, name: str, port: int = SERVICE_PORT) -> dict[str, Any]:
    """The Service spreading requests over the ready pods of ``name`` on ``port``."""
    http = {"name": "http", "port": port, "targetPort": "http"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(shape, name, name),
        "spec": {"selector": labels(name), "ports": [http]},
    }


def disruption_budget(shape: Shape, name: str) -> dict[str, Any]:
    """A drain leaves at least one replica of the service serving."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(shape, name, name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels(name)}},
    }


def setup_job(shape: Shape) -> dict[str, Any]:
    """`outboxkit dev saga prepare` against the cluster's components: roles, databases, migrations,
    CDC grants, publications, the connectors (the KafkaConnectors' configs, equal) and topics."""
    files = {
        "postgres.password": postgres_secret("postgres"),
        **{f"{s}.password": postgres_secret(s) for s in shape.services},
        f"{shape.cdc_role}.password": postgres_secret(shape.cdc_role),
        "kafka-setup.password": ("setup", "password"),
    }
    env = {
        "OUTBOXKIT_DATABASE_URL": (
            f"postgresql+psycopg://postgres@{shape.database_host}:{shape.database_port}/outboxkit"
        ),
        "OUTBOXKIT_DATABASE_PASSWORD_FILE": f"{SECRETS_DIR}/postgres.password",
        "OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS": shape.bootstrap,
        "OUTBOXKIT_KAFKA_SASL_USERNAME": "setup",
        "OUTBOXKIT_KAFKA_SASL_PASSWORD_FILE": f"{SECRETS_DIR}/kafka-setup.password",
        "OUTBOXKIT_CONNECT_URL": f"http://{shape.connect_name}-connect-api:8083",
        "OUTBOXKIT_CONNECT_DATABASE_HOST": shape.database_host,
        "OUTBOXKIT_CONNECT_DATABASE_PORT": str(shape.database_port),
        "OUTBOXKIT_CONNECT_EXACTLY_ONCE": "true",
        "OUTBOXKIT_SECRETS_DIR": SECRETS_DIR,
        "OUTBOXKIT_CONNECT_SECRETS_DIR": CONNECT_SECRETS_DIR,
        "OUTBOXKIT_CDC_ROLE": shape.cdc_role,
        "OUTBOXKIT_TOPIC_PREFIX": shape.topic_prefix,
        "OUTBOXKIT_OUTBOX_MODE": "delete",
        "OUTBOXKIT_STACK_DIR": "/tmp/outboxkit-stack",
    }
    env_list = [{"name": k, "value": v} for k, v in env.items()]
    container = _container(shape, "setup", ["outboxkit", "dev", "saga", "prepare"], env_list)
    container["resources"] = resources("250m", "512Mi", cpu_limit="1")
    pod = _pod(shape, [container], files)
    pod["restartPolicy"] = "OnFailure"
    pod_labels = labels(SETUP)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(shape, SETUP, SETUP),
        "spec": {
            "backoffLimit": 6,
            "template": {"metadata": {"labels": pod_labels}, "spec": pod},
        },
    }


def setup_reaches_connect(shape: Shape) -> dict[str, Any]:
    """Strimzi lets only its operator reach Connect's REST API; the set-up Job may too."""
    return _reaches_connect(shape, SETUP)


def _reaches_connect(shape: Shape, component: str) -> dict[str, Any]:
    """A NetworkPolicy letting ``component``'s pods reach Connect's REST API."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(shape, f"{component}-to-connect", component),
        "spec": {
            "podSelector": {"matchLabels": {"strimzi.io/cluster": shape.connect_name}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": labels(component)}}],
                    "ports": [{"protocol": "TCP", "port": 8083}],
                }
            ],
        },
    }


def console_secrets(shape: Shape) -> dict[str, tuple[str, str]]:
    """The console's files: each job's database password, its own Kafka user's, its users file
    and the key signing its session cookies."""
    return {
        **{f"{s}.password": postgres_secret(s) for s in shape.services},
        "kafka-console.password": (CONSOLE, "password"),
        "console.users": (CONSOLE_SECRET, "console.users"),
        "console-session.key": (CONSOLE_SECRET, "console-session.key"),
    }


def console_env(shape: Shape) -> list[dict[str, str]]:
    """Every job's settings (the services' own), the console's Kafka login and its settings."""
    values: dict[str, str] = {}
    for name in shape.services:
        for variable in service_env(shape, name):
            if not variable["name"].startswith(("OUTBOXKIT_KAFKA_SASL_", "OTEL_")):
                values[variable["name"]] = variable["value"]
    values |= {
        "OUTBOXKIT_KAFKA_SASL_USERNAME": CONSOLE,
        "OUTBOXKIT_KAFKA_SASL_PASSWORD_FILE": f"{SECRETS_DIR}/kafka-console.password",
        "OUTBOXKIT_CONSOLE_HOST": "0.0.0.0",
        # Plain HTTP inside the cluster: TLS ends at the ingress in front of it (README).
        "OUTBOXKIT_CONSOLE_INSECURE_HTTP": "true",
        "OUTBOXKIT_CONSOLE_PORT": str(CONSOLE_PORT),
        "OUTBOXKIT_CONSOLE_USERS_FILE": f"{SECRETS_DIR}/console.users",
        "OUTBOXKIT_CONSOLE_SECRET_FILE": f"{SECRETS_DIR}/console-session.key",
        "OUTBOXKIT_CONNECT_URL": f"http://{shape.connect_name}-connect-api:8083",
    }
    return [{"name": name, "value": value} for name, value in values.items()]


def console_deployment(shape: Shape) -> dict[str, Any]:
    """The operator console (`outboxkit console`) of every service's consumer job: one replica
    (sessions are cookies signed with the mounted key), ready while /healthz answers 200."""
    jobs = [f"outboxkit_workshop.saga.jobs:{s}" for s in shape.services]
    container = _container(shape, CONSOLE, ["outboxkit", "console", *jobs], console_env(shape))
    container["ports"] = [{"name": "http", "containerPort": CONSOLE_PORT}]
    container["readinessProbe"] = _probe("/healthz", 10)
    container["livenessProbe"] = {**_probe("/healthz", 15), "initialDelaySeconds": 30}
    container["resources"] = resources("100m", "512Mi", cpu_limit="500m")
    return _deployment(shape, CONSOLE, 1, container, console_secrets(shape))


def console_service(shape: Shape) -> dict[str, Any]:
    """The console inside the cluster only (reach it with `kubectl port-forward`, or put an
    HTTPS ingress in front of it)."""
    return service(shape, CONSOLE, CONSOLE_PORT)


def console_reaches_connect(shape: Shape) -> dict[str, Any]:
    """The console reads the connectors' status from Connect's REST API."""
    return _reaches_connect(shape, CONSOLE)
