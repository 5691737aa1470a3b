"""The shared kernel: what every layer of the framework uses, and nothing else.

- `kernel.envelope` and `kernel.wire`: the event and its Kafka record format (header names,
  encode and decode, JSONB rendering, source positions);
- `kernel.kafka`: Kafka client plumbing (SASL/TLS settings, end offsets);
- `kernel.engines`: every database engine the framework makes, pooled by role;
- `kernel.secrets`: passwords read from files, never from the clear;
- `kernel.tracing`: W3C trace context, spans and the OpenTelemetry set-up;
- `kernel.errors`: the framework's base errors and `is_transient`.

It imports no other package of the project; every other package may import it."""
