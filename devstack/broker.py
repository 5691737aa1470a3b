"""The embedded Kafka-API broker (Tansu, in-memory storage)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient

from devstack.processes import port_open, start, wait_until


def _ready(bootstrap: str) -> bool:
    port = int(bootstrap.rsplit(":", 1)[1])
    if not port_open(port):
        return False
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})
    try:
        admin.list_topics(timeout=2)
        return True
    except Exception:
        return False


def start_broker(tansu: Path, port: int, log: Path) -> int:
    """Start Tansu on ``port`` and wait until it answers metadata requests; return its PID."""
    address = f"tcp://127.0.0.1:{port}"
    argv = [
        str(tansu),
        "broker",
        "--listener-url",
        address,
        "--advertised-listener-url",
        address,
        "--storage-engine",
        "memory://tansu/",
    ]
    pid = start("broker", argv, log=log)
    wait_until("broker", lambda: _ready(f"127.0.0.1:{port}"), timeout=30, pid=pid, log=log)
    return pid
