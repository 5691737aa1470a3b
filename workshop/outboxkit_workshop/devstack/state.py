"""What `stack up` started and created, recorded in the stack's state file so that `status`
reads it and `down` undoes exactly that. Every engine is a cluster of nodes; one node is the
cluster of size one."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

EMBEDDED, EXTERNAL = "embedded", "external"
# Spark inside the consumer driver's JVM (local[N]): no process of the stack's own.
LOCAL = "local"


@dataclass
class Node:
    """One process of an engine: its name (``kafka-2``), role, PID and ports."""

    name: str
    role: str = ""
    pid: int | None = None
    port: int | None = None
    endpoint: str = ""
    # A second port the node keeps across restarts (a broker's KRaft controller listener, a
    # Spark node's web UI).
    extra_port: int | None = None


@dataclass
class Component:
    """One engine: its mode, the endpoint clients use (a bootstrap list, a REST URL, a Spark
    master URL) and, when embedded, its nodes."""

    mode: str
    endpoint: str = ""
    nodes: list[Node] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        """The first node's PID (the only one's, for a single-node engine)."""
        return self.nodes[0].pid if self.nodes else None

    @property
    def port(self) -> int | None:
        return self.nodes[0].port if self.nodes else None

    def node(self, name: str) -> Node:
        """The node called ``name``."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} (nodes: {', '.join(n.name for n in self.nodes)})")

    @classmethod
    def from_dict(cls, raw: dict[str, Any], name: str) -> Component:
        """A recorded component; a state file written before clusters (one PID and port on the
        component itself) reads as a cluster of one node."""
        if "nodes" in raw:
            return cls(raw["mode"], raw.get("endpoint", ""), [Node(**n) for n in raw["nodes"]])
        nodes = []
        if raw.get("pid") or raw.get("port"):
            nodes.append(
                Node(
                    name=name,
                    role=name,
                    pid=raw.get("pid"),
                    port=raw.get("port"),
                    endpoint=raw.get("endpoint", ""),
                    extra_port=raw.get("extra_port"),
                )
            )
        return cls(raw["mode"], raw.get("endpoint", ""), nodes)


@dataclass
class StackState:
    """What `up` started and created, so that `down` can undo exactly that."""

    postgres: Component
    broker: Component
    connect: Component
    spark: Component = field(default_factory=lambda: Component(LOCAL, "local[2]"))
    connectors: list[str] = field(default_factory=list)
    slots: list[str] = field(default_factory=list)
    publications: list[str] = field(default_factory=list)
    # The partitionable network the nodes run on (`outboxkit_workshop.devstack.network.Network`'s
    # record); None: every node on loopback.
    network: dict[str, Any] | None = None

    @classmethod
    def load(cls, path: Path) -> StackState | None:
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        return cls(
            postgres=Component.from_dict(raw["postgres"], "postgres"),
            broker=Component.from_dict(raw["broker"], "kafka-1"),
            connect=Component.from_dict(raw["connect"], "connect-1"),
            spark=Component.from_dict(raw["spark"], "spark")
            if "spark" in raw
            else Component(LOCAL, "local[2]"),
            connectors=raw.get("connectors", []),
            slots=raw.get("slots", []),
            publications=raw.get("publications", []),
            network=raw.get("network"),
        )

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(asdict(self), indent=2))
        partial.rename(path)
