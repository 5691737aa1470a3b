"""The shared kernel: what every layer of the framework uses, and nothing else.

- `outboxkit.kernel.envelope` and `outboxkit.kernel.wire`: the event and its Kafka record format
(header names,
  encode and decode, JSONB rendering, source positions);
- `outboxkit.kernel.kafka`: Kafka client plumbing (SASL/TLS settings, end offsets);
- `outboxkit.kernel.engines`: every database engine the framework makes, pooled by role;
- `outboxkit.kernel.secrets`: passwords read from files, never from the clear;
- `outboxkit.kernel.tracing`: W3C trace context, spans and the OpenTelemetry set-up;
- `outboxkit.kernel.errors`: the framework's base errors and `is_transient`.
- `outboxkit.kernel.retry`: the one retry and wait policy (`Backoff`, `retrying`, `wait_until`).

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

from outboxkit.kernel.packages import shadowed

_why = shadowed()
if _why is not None:
    raise ImportError(_why)

if TYPE_CHECKING:
    from outboxkit.kernel.errors import is_transient
    from outboxkit.kernel.secrets import SecretError, read_secret, url_with_password
    from outboxkit.kernel.wire.record import KafkaRecord, UndecodableRecord, decode, encode

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
    "KafkaRecord": "outboxkit.kernel.wire.record",
    "SecretError": "outboxkit.kernel.secrets",
    "UndecodableRecord": "outboxkit.kernel.wire.record",
    "decode": "outboxkit.kernel.wire.record",
    "encode": "outboxkit.kernel.wire.record",
    "is_transient": "outboxkit.kernel.errors",
    "read_secret": "outboxkit.kernel.secrets",
    "url_with_password": "outboxkit.kernel.secrets",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'outboxkit.kernel' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
