"""What a connector's config needs installed on Kafka Connect: the connector class and every
transform and predicate class it names, checked against the worker's plugin list before the
config is put (Connect's own answer, "Class ... could not be found", names no fix)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cdc.config import SOURCE_POSITION_HEADERS


def required_classes(config: Mapping[str, str]) -> list[str]:
    """The plugin classes ``config`` names: its connector, transforms and predicates."""
    named = [config["connector.class"]] if "connector.class" in config else []
    for key, value in config.items():
        parts = key.split(".")
        if len(parts) == 3 and parts[0] in ("transforms", "predicates") and parts[2] == "type":
            named.append(value)
    return sorted(set(named))


def missing(config: Mapping[str, str], installed: Iterable[str]) -> list[str]:
    """The classes ``config`` needs that are not in ``installed`` (the worker's plugins)."""
    have = set(installed)
    return [name for name in required_classes(config) if name not in have]


def fix_for(classes: Iterable[str]) -> str:
    """What to do about missing plugin classes, one line each."""
    lines = []
    for name in classes:
        if name == SOURCE_POSITION_HEADERS:
            lines.append(
                f"{name} (outboxkit's transform): install it on every Connect worker with "
                "`outboxkit cdc plugin --into DIR`, DIR a directory of the workers' plugin.path, "
                "then restart them"
            )
        elif name.startswith("io.debezium."):
            lines.append(
                f"{name} (Debezium): install Debezium's Postgres connector on the workers' "
                "plugin.path (or run Debezium's Connect image) at the version cdc/java/pom.xml pins"
            )
        else:
            lines.append(f"{name}: install the plugin that provides it on every Connect worker")
    return "\n".join(lines)
