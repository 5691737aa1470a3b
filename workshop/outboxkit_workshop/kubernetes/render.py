"""Every manifest of a `Shape`, grouped in files, and their YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from outboxkit_workshop.kubernetes import connect, kafka, spark, workloads
from outboxkit_workshop.kubernetes.shape import Shape

HEADER = (
    "# Rendered by `outboxkit dev kubernetes render`; edit the renderer\n"
    "# (workshop/outboxkit_workshop/kubernetes/), not this file: tests/unit/test_kubernetes.py\n"
    "# checks it equals a fresh render.\n"
)


def manifests(shape: Shape) -> dict[str, list[dict[str, Any]]]:
    """File name -> its objects, in the order `kubectl apply -f DIR` needs nothing of."""
    services = shape.services
    return {
        "10-kafka.yaml": [
            kafka.kafka(shape),
            kafka.node_pool(shape),
            *kafka.topics(shape),
            *kafka.users(shape),
        ],
        "20-connect.yaml": [connect.kafka_connect(shape), *connect.connectors(shape)],
        "30-setup.yaml": [
            workloads.service_account(shape),
            workloads.client_config(shape),
            workloads.setup_job(shape),
            workloads.setup_reaches_connect(shape),
        ],
        "40-services.yaml": [
            obj
            for name in services
            for obj in (
                workloads.deployment(shape, name),
                workloads.service(shape, name),
                workloads.disruption_budget(shape, name),
            )
        ],
        "50-consumers.yaml": [
            obj
            for name in services
            for obj in (spark.checkpoint_claim(shape, name), spark.application(shape, name))
        ],
        "60-console.yaml": [
            workloads.console_deployment(shape),
            workloads.console_service(shape),
            workloads.console_reaches_connect(shape),
        ],
    }


def render_yaml(objects: list[dict[str, Any]]) -> str:
    """Objects as one multi-document YAML text."""
    body: str = yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False, width=100)
    return HEADER + "---\n" + body


def write_manifests(shape: Shape, out: Path) -> list[Path]:
    """The manifests written into ``out``; returns the files."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, objects in manifests(shape).items():
        path = out / name
        path.write_text(render_yaml(objects))
        written.append(path)
    return written
