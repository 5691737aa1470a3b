"""The shared kernel: what every layer of the framework uses, and nothing else.

- `kernel.envelope` and `kernel.wire`: the event and its Kafka record format (header names,
  encode and decode, JSONB rendering, source positions);
- `kernel.kafka`: Kafka client plumbing (SASL/TLS settings, end offsets);
- `kernel.engines`: every database engine the framework makes, pooled by role;
- `kernel.secrets`: passwords read from files, never from the clear;
- `kernel.tracing`: W3C trace context, spans and the OpenTelemetry set-up;
- `kernel.errors`: the framework's base errors and `is_transient`.
- `kernel.retry`: the one retry and wait policy (`Backoff`, `retrying`, `wait_until`).

It imports no other package of the project; every other package may import it.

Its public names are the ones a service uses directly: the record format as the connector
writes it (`encode`, `decode`, `KafkaRecord`, for tests and tools that read the topics), whether
an error is an outage (`is_transient`) and passwords from mounted files (`read_secret`,
`url_with_password`). The envelope, the engines, the errors and the trace context are
re-exported by `outbox` and documented there. They are imported on first use, so importing a
kernel module stays as light as that module."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernel.errors import is_transient
    from kernel.secrets import SecretError, read_secret, url_with_password
    from kernel.wire.record import KafkaRecord, UndecodableRecord, decode, encode

__all__ = [
    "KafkaRecord",
    "SecretError",
    "UndecodableRecord",
    "decode",
    "encode",
    "is_transient",
    "read_secret",
    "url_with_password",
]

_LAZY = {
    "KafkaRecord": "kernel.wire.record",
    "SecretError": "kernel.secrets",
    "UndecodableRecord": "kernel.wire.record",
    "decode": "kernel.wire.record",
    "encode": "kernel.wire.record",
    "is_transient": "kernel.errors",
    "read_secret": "kernel.secrets",
    "url_with_password": "kernel.secrets",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kernel' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
