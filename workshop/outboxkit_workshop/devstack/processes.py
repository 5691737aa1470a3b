"""Start detached service processes with logs, wait for health, and stop them by PID."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from outboxkit.kernel import retry

LOOPBACK_ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class Host:
    """Where one process runs: the address it binds and others reach it at, and the network
    namespace it runs in (None: the tools' own, i.e. loopback)."""

    address: str = LOOPBACK_ADDRESS
    namespace: str | None = None

    def wrap(self, argv: Sequence[str], user: str | None = None) -> tuple[list[str], str | None]:
        """``argv`` as started in this host's namespace, and the user ``subprocess`` must switch
        to (None once the command switches itself: ``ip netns exec`` needs root, so the switch
        to ``user`` happens inside it, by setpriv). The PID is the command's own: both exec."""
        if self.namespace is None:
            return list(argv), user
        prefix = ["ip", "netns", "exec", self.namespace]
        if user is not None:
            prefix += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"]
        return [*prefix, *argv], None


LOOPBACK = Host()


class StackError(RuntimeError):
    """A stack component failed to start or stop; the message points at its log."""


def log4j2_properties(root_level: str, loggers: dict[str, str]) -> str:
    """A log4j2 properties config for a JVM component: console lines, per-logger levels."""
    lines = [
        "status = warn",
        "appender.out.type = Console",
        "appender.out.name = OUT",
        "appender.out.layout.type = PatternLayout",
        "appender.out.layout.pattern = [%d] %p %m (%c)%n",
        f"rootLogger.level = {root_level}",
        "rootLogger.appenderRef.out.ref = OUT",
    ]
    for i, (name, level) in enumerate(loggers.items()):
        lines += [f"logger.l{i}.name = {name}", f"logger.l{i}.level = {level}"]
    return "\n".join(lines) + "\n"


def java_properties(settings: Mapping[str, str]) -> str:
    """A Java .properties file of ``settings``, each value escaped as java.util.Properties reads
    it (a backslash, e.g. in a JAAS password, would otherwise be taken as an escape)."""
    return "".join(f"{key}={_property_value(value)}\n" for key, value in settings.items())


def _property_value(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + escaped if escaped[:1] in (" ", "\t", "\f") else escaped


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK_ADDRESS, 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = LOOPBACK_ADDRESS) -> bool:
    """True when something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def released(port: int, host: str = LOOPBACK_ADDRESS) -> Callable[[], bool]:
    """A `wait_until` check: True once nothing accepts connections on ``host``:``port`` (a
    killed process's listener may linger a moment)."""
    return lambda: not port_open(port, host)


def alive(pid: int | None) -> bool:
    """True when a process with this PID exists (and is not a zombie we already reaped)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    try:  # a zombie child counts as dead: reap it
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        stat = Path(f"/proc/{pid}/stat")
        return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def process_children() -> dict[int, list[int]]:
    """Every live process's children by PID, read once from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:  # after the command name, which may hold ") "
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        children.setdefault(parent, []).append(int(entry.name))
    return children


def process_tree(pid: int, children: Mapping[int, list[int]] | None = None) -> list[int]:
    """``pid`` and its live descendants, by ``children`` (`process_children`; read now when
    None)."""
    children = process_children() if children is None else children
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def tail(log: Path, lines: int = 25) -> str:
    """The last lines of a log file, for error messages."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(
    name: str,
    argv: Sequence[str],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
    host: Host | None = None,
) -> int:
    """Start ``argv`` in its own session, stdout and stderr appended to ``log``; return its PID.
    ``host``: where it runs (default: here, on loopback)."""
    if host is not None:
        argv, user = host.wrap(argv, user)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n=== starting {name}: {' '.join(argv)}\n".encode())
        out.flush()
        process = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
            user=user,
        )
    return process.pid


def wait_until(
    what: str,
    ready: Callable[[], bool],
    *,
    timeout: float,
    pid: int | None = None,
    log: Path | None = None,
    poll: float = 0.25,
) -> None:
    """Poll ``ready`` until true; fail early if ``pid`` dies, with the log's tail in the message."""
    lines = f"; last log lines:\n{tail(log) if log else ''}"

    def up() -> bool:
        if ready():
            return True
        if pid is not None and not alive(pid):
            raise StackError(f"{what} exited during start-up{lines}")
        return False

    retry.wait_until(
        up, timeout=timeout, poll=poll, what=what, error=lambda gave_up: StackError(gave_up + lines)
    )


def gone(pid: int | None, timeout: float, poll: float = 0.05) -> bool:
    """Wait up to ``timeout`` seconds for process ``pid`` to end; True if it did."""
    try:
        retry.wait_until(lambda: not alive(pid), timeout=timeout, poll=poll, what=f"pid {pid}")
    except retry.WaitTimeout:
        return False
    return True


def stop(pid: int | None, *, sig: int = signal.SIGTERM, timeout: float = 20.0) -> bool:
    """Send ``sig`` to the process, wait, then SIGKILL it; True if it was running."""
    if not alive(pid):
        return False
    assert pid is not None
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    if gone(pid, timeout, poll=0.1):
        return True
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    gone(pid, 5)
    return True
