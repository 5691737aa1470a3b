"""The consumer jobs as Spark operator SparkApplications: one driver per job and checkpoint,
the driver running deploy/spark/consume.py (`outboxkit consume
outboxkit_workshop.saga.jobs:<service>`)
in cluster mode, Spark's Kafka connector from the image (/opt/outboxkit/spark-jars)."""

from __future__ import annotations

from typing import Any

from outboxkit_workshop.kubernetes.shape import METRICS_PORT, SECRETS_DIR, Shape, metadata
from outboxkit_workshop.kubernetes.workloads import (
    ACCOUNT,
    CLIENT_CONFIG,
    pod_security,
    secret_files,
    service_env,
)
from spark_consumers.session import FORKLESS_FS_CLASS, SPECULATION

API = "sparkoperator.k8s.io/v1beta2"
JARS = "/opt/outboxkit/spark-jars/*"
CHECKPOINTS = "/var/lib/outboxkit/checkpoints"
# build_session takes its master from OUTBOXKIT_SPARK_MASTER: the one the operator submits to.
KUBERNETES_MASTER = "k8s://https://kubernetes.default.svc:443"


def checkpoint_claim(shape: Shape, service: str) -> dict[str, Any]:
    """The driver's checkpoint, outliving the driver pod."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(shape, f"{service}-checkpoints", f"{service}-consumer"),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": shape.checkpoint_storage}},
        },
    }


def _env(shape: Shape, service: str) -> list[dict[str, str]]:
    env = [e for e in service_env(shape, service) if e["name"] != "OTEL_SERVICE_NAME"]
    return [
        *env,
        {"name": "OTEL_SERVICE_NAME", "value": f"{service}-consumer"},
        {"name": "OUTBOXKIT_SPARK_MASTER", "value": KUBERNETES_MASTER},
        {"name": "OUTBOXKIT_CONSUMER_METRICS_PORT", "value": str(METRICS_PORT)},
        {"name": "OUTBOXKIT_CONSUMER_METRICS_HOST", "value": "0.0.0.0"},
    ]


def _role(shape: Shape, service: str, cores: int, memory: str) -> dict[str, Any]:
    """What a driver and an executor share: the job's settings and secrets."""
    mounts = [{"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True}]
    return {
        "cores": cores,
        "memory": memory,
        "env": _env(shape, service),
        "envFrom": [{"configMapRef": {"name": CLIENT_CONFIG}}],
        "volumeMounts": mounts,
        "serviceAccount": ACCOUNT,
        "labels": {"app.kubernetes.io/name": f"{service}-consumer"},
        "podSecurityContext": pod_security(),
    }


def application(shape: Shape, service: str) -> dict[str, Any]:
    """One service's consumer job, restarted whenever it stops."""
    from outboxkit_workshop.kubernetes.workloads import service_secrets

    driver = _role(shape, service, 1, "1g")
    driver["volumeMounts"].append({"name": "checkpoints", "mountPath": CHECKPOINTS})
    executor = {**_role(shape, service, 1, "1g"), "instances": shape.spark_executors}
    volumes = [
        secret_files(service_secrets(service)),
        {
            "name": "checkpoints",
            "persistentVolumeClaim": {"claimName": f"{service}-checkpoints"},
        },
    ]
    return {
        "apiVersion": API,
        "kind": "SparkApplication",
        "metadata": metadata(shape, f"{service}-consumer", f"{service}-consumer"),
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": shape.image,
            "mainApplicationFile": "local:///opt/outboxkit/consume.py",
            "arguments": [
                f"outboxkit_workshop.saga.jobs:{service}",
                "--trigger",
                str(shape.trigger_seconds),
                "--checkpoint",
                CHECKPOINTS,
            ],
            "sparkVersion": shape.versions.spark,
            "sparkConf": {
                "spark.app.name": f"saga_{service}",
                "spark.driver.extraClassPath": JARS,
                "spark.executor.extraClassPath": JARS,
                "spark.executorEnv.OTEL_SERVICE_NAME": f"{service}-consumer",
                # A frozen executor's task gets a copy on another node; the inbox applies once.
                **SPECULATION,
                # Checkpoint files written without a chmod process each (the jar is in JARS).
                # The operator's own spark-submit gets this setting too, without the jar: it
                # resolves no file: path for these applications (their files are local://
                # in the image); a dependency given as a plain path would need it there.
                "spark.hadoop.fs.file.impl": FORKLESS_FS_CLASS,
                # Driver and executors prove one secret to each other, which Spark makes per
                # application on Kubernetes and gives only its executor pods; their RPC is
                # encrypted (AES): no other pod can join the application or read its traffic.
                "spark.authenticate": "true",
                "spark.network.crypto.enabled": "true",
            },
            "restartPolicy": {
                "type": "Always",
                "onFailureRetryInterval": 10,
                "onSubmissionFailureRetryInterval": 20,
            },
            "volumes": volumes,
            "driver": driver,
            "executor": executor,
        },
    }
