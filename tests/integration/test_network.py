"""The partitionable network on the real kernel: nodes in namespaces of their own reach each
other on a bridge; a cut drops a link both ways or one way, a slow link delays it, healing
restores it, and destroying the network leaves no namespace behind. Needs root (skipped
elsewhere, with the reason)."""

from __future__ import annotations

import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from outboxkit.kernel.engines import engine_for
from outboxkit_workshop.devstack import artifacts, postgres
from outboxkit_workshop.devstack.network import Network, unavailable
from outboxkit_workshop.devstack.processes import free_port, start, stop
from outboxkit_workshop.devstack.secrets import write_pgpass
from outboxkit_workshop.devstack.settings import StackSettings

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

# A TCP server answering each line with the same line.
ECHO = (
    "import socket,sys\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind((sys.argv[1], 7000)); s.listen()\n"
    "while True:\n"
    "    c, _ = s.accept(); f = c.makefile('rwb')\n"
    "    for line in f: f.write(line); f.flush()\n"
)


# The processes a test started in the network's namespaces: stopped before it is destroyed.
STARTED: list[int] = []


@pytest.fixture
def network(tmp_path: Path) -> Iterator[Network]:
    net = Network.create(tmp_path)
    try:
        yield net
    finally:
        net.heal()
        while STARTED:
            stop(STARTED.pop(), timeout=5)
        net.destroy()
        assert net.leftovers() == []


def serve(net: Network, node: str, tmp_path: Path) -> str:
    host = net.host(node)
    pid = start(
        node, [sys.executable, "-c", ECHO, host.address], log=tmp_path / f"{node}.log", host=host
    )
    STARTED.append(pid)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if reaches(host.address, timeout=0.5):
            return host.address
        time.sleep(0.1)
    raise AssertionError(f"{node}'s server never answered")


def reaches(address: str, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, 7000), timeout=timeout):
            return True
    except OSError:
        return False


def round_trips(address: str, count: int = 10) -> list[float]:
    with socket.create_connection((address, 7000), timeout=5) as conn:
        f = conn.makefile("rwb")
        times = []
        for _ in range(count):
            began = time.monotonic()
            f.write(b"ping\n")
            f.flush()
            assert f.readline() == b"ping\n"
            times.append(time.monotonic() - began)
        return times


def test_nodes_reach_each_other_on_their_own_addresses(network, tmp_path):
    a = serve(network, "a", tmp_path)
    b = serve(network, "b", tmp_path)
    assert a != b and a.startswith(network.subnet) and b.startswith(network.subnet)
    # Each node listens on its address only: its namespace has no other way in.
    host_b = network.host("b")
    probe = f"import socket; socket.create_connection(('{a}', 7000), timeout=2); print('reached')"
    log = tmp_path / "probe.log"
    pid = start("probe", [sys.executable, "-c", probe], log=log, host=host_b)
    STARTED.append(pid)
    deadline = time.monotonic() + 10
    while "reached" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "reached" in log.read_text()


def test_a_cut_drops_the_link_until_healed(network, tmp_path):
    a = serve(network, "a", tmp_path)
    b = serve(network, "b", tmp_path)
    network.cut(["tools"], ["a"])
    assert not reaches(a)
    assert reaches(b)  # only the link cut
    assert network.heal() == ["tools <-> a: cut"]
    assert reaches(a)


def test_a_one_way_cut_drops_one_direction_only(network, tmp_path):
    a = serve(network, "a", tmp_path)
    # a's answers lost: a connection from the tools cannot complete its handshake.
    network.cut(["a"], ["tools"], oneway=True)
    assert not reaches(a)
    network.heal()
    # The other way round: the tools' packets to a lost.
    network.cut(["tools"], ["a"], oneway=True)
    assert not reaches(a)
    network.heal()
    assert reaches(a)


def test_a_slow_link_delays_each_round_trip(network, tmp_path):
    a = serve(network, "a", tmp_path)
    quick = statistics.median(round_trips(a))
    network.slow(["tools"], ["a"], delay=0.1)
    slow = statistics.median(round_trips(a))
    network.heal()
    # 100 ms each way: a round trip takes at least 0.2 s (a correctness check of the delay,
    # not a speed target), and well under a hung link's seconds.
    assert 0.15 <= slow < 2.0, (quick, slow)
    assert statistics.median(round_trips(a)) < 0.1
    assert not network.shapers


def test_a_query_sent_into_a_partition_fails_instead_of_hanging(network):
    """Postgres in a namespace of its own, cut silently from the tools mid-connection: the
    framework's engine gives up on the connection (``outboxkit.kernel.engines.NETWORK``)
    within its bounds, and a new connection works once the link heals. Without those
    settings the query waits for the kernel's retransmissions, about 15 minutes."""
    base = Path(tempfile.mkdtemp(prefix="outboxkit-netpg-"))
    base.chmod(0o755)
    found = artifacts.locate(StackSettings(_env_file=None).cache_dir)
    data, log = base / "pgdata", base / "postgres.log"
    host = network.host("db")
    passfile = write_pgpass(base / "pgpass", [("postgres", "net-test-password")])
    postgres.initdb(found.postgres_bin, data, log, "net-test-password")
    port, pid = free_port(), None
    try:
        pid = postgres.start_server(
            found.postgres_bin,
            data,
            port,
            log,
            passfile,
            "net-test-password",
            host,
            network.network(),
        )
        url = postgres.url(port, "postgres", passfile, host.address)
        engine = engine_for(url, "service", pool_size=1)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
            network.cut(["tools"], ["db"])
            began = time.monotonic()
            with pytest.raises(OperationalError):
                conn.execute(text("SELECT pg_sleep(0)"))
            waited = time.monotonic() - began
        network.heal()
        with engine.connect() as conn:  # the pool's ping drops the dead connection
            assert conn.execute(text("SELECT 2")).scalar() == 2
        engine.dispose()
        # tcp_user_timeout (20 s) bounds it; 120 s leaves the machine's load room.
        assert waited < 120, waited
    finally:
        stop(pid, sig=signal.SIGINT)
        shutil.rmtree(base, ignore_errors=True)
