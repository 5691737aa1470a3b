"""The Kafka-side size limits outboxkit sets everywhere (local stack, deploy/): Kafka's defaults.

One event becomes one Kafka record: key (aggregate id) + value (payload JSON) + headers. Three
limits stand between the outbox and a consumer, and the local stack keeps Kafka's defaults so
that it fails where a default production cluster fails:

- the Connect worker's producer ``max.request.size`` (1,048,576): a larger serialized record is
  refused by the producer itself (``RecordTooLargeException``);
- the broker's ``message.max.bytes`` (1,048,588 = 1 MiB + the 12-byte log overhead), overridable
  per topic by ``max.message.bytes``: a larger record batch is refused by the broker;
- consumers' fetch sizes (``max.partition.fetch.bytes``, ``fetch.max.bytes``; librdkafka's
  ``fetch.message.max.bytes``) are not hard limits since KIP-74: a record larger than them is
  still returned, alone, so the Spark Kafka source and the confluent-kafka readers need no setting.

``publish`` refuses an event whose whole record (key + rendered value + headers + overhead) is
over 1,000,000 bytes (outboxkit.kernel.envelope's ``DEFAULT_MAX_RECORD_BYTES``), below both limits
with room for the record and batch overhead. A row written around ``publish`` can still exceed them;
the connector task then FAILS and stays failed (cdc.health tells the way out).
"""

from __future__ import annotations

# Kafka's default broker message.max.bytes (and so every topic's max.message.bytes).
BROKER_MESSAGE_MAX_BYTES = 1_048_588
# Kafka's default producer max.request.size, the Connect worker's producer.max.request.size.
PRODUCER_MAX_REQUEST_SIZE = 1_048_576
# Kafka's default since 3.0 (KIP-722); stated because the way out of a too-large record sets
# producer.override.max.request.size on the connector, which a policy of None would refuse.
CONNECTOR_CLIENT_CONFIG_OVERRIDE_POLICY = "All"

# The same settings, by the name each component's configuration uses.
BROKER_SETTINGS: dict[str, str] = {"message.max.bytes": str(BROKER_MESSAGE_MAX_BYTES)}
WORKER_SETTINGS: dict[str, str] = {
    "producer.max.request.size": str(PRODUCER_MAX_REQUEST_SIZE),
    "connector.client.config.override.policy": CONNECTOR_CLIENT_CONFIG_OVERRIDE_POLICY,
}
