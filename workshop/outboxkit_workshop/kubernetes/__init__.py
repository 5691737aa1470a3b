"""Kubernetes manifests of the saga's whole shape (Strimzi Kafka and Connect, the outbox
connectors, the services, the Spark consumer jobs, the set-up job, the operator console),
rendered as plain dicts from one `Shape`; `outboxkit dev kubernetes render` writes them as
YAML."""

from outboxkit_workshop.kubernetes.render import manifests, render_yaml, write_manifests
from outboxkit_workshop.kubernetes.shape import Shape

__all__ = ["Shape", "manifests", "render_yaml", "write_manifests"]
