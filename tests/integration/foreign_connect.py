"""A Kafka Connect worker as a team runs its own: Connect and Debezium on its classpath, nothing of
outboxkit's (the transform comes only from ``plugin.path``), in a group of its own on the test
session's Kafka. The install test starts it from the page's shell session, where the page says
to restart the workers, so it loads what the page's `outboxkit cdc plugin` put on its plugin
path:

    python tests/integration/foreign_connect.py SPEC.json

SPEC names the stack's Connect libraries, the plugin path, the Kafka bootstrap servers, the
REST port, the secrets directory of its config provider and a work directory; the worker's PID
is written to WORKDIR/pid, for the test to stop it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from cdc.transform import JAR_PREFIX
from outboxkit_workshop.devstack.connect import start_worker


def foreign_libs(stack_libs: Path, into: Path) -> Path:
    """A classpath directory of the stack's Connect libraries without outboxkit's transform."""
    into.mkdir(parents=True, exist_ok=True)
    for jar in stack_libs.glob("*.jar"):
        if not jar.name.startswith(JAR_PREFIX):
            (into / jar.name).symlink_to(jar)
    return into


def main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    work = Path(spec["workdir"])
    libs = foreign_libs(Path(spec["stack_libs"]), work / "libs")
    pid = start_worker(
        Path(shutil.which("java") or "java"),
        libs,
        spec["bootstrap"],
        int(spec["port"]),
        work / "worker",
        work / "connect.log",
        group=spec["group"],
        secrets_dir=Path(spec["secrets_dir"]),
        plugin_path=Path(spec["plugin_path"]),
    )
    (work / "pid").write_text(str(pid))
    print(f"Connect worker {pid} ready on port {spec['port']}, plugin.path {spec['plugin_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
