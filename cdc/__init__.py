"""Change data capture: Debezium connector config, Kafka Connect client, Postgres checks."""

import outboxkit.kernel  # noqa: F401  (first: it refuses packages shadowing the framework's)
from cdc.config import ConnectorConfigError, ConnectorSettings, build_connector_config, topic_for
from cdc.connect import ConnectClient, ConnectError, ConnectorStatus
from cdc.settings import CdcSettings, connector_settings
from cdc.supervisor import RestartPolicy, Supervisor

__all__ = [
    "CdcSettings",
    "ConnectClient",
    "ConnectError",
    "ConnectorConfigError",
    "ConnectorSettings",
    "ConnectorStatus",
    "RestartPolicy",
    "Supervisor",
    "build_connector_config",
    "connector_settings",
    "topic_for",
]
