"""The link shaper on a real bridge: two nodes, each in a network namespace of its own, joined
by a bridge in a switch namespace whose FORWARD chain (bridge netfilter) sends their packets to
the shaper's NFQUEUE. Every namespace is made here and deleted afterwards; nothing is sent to an
address outside them."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import select
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("iptables")):
    pytest.skip(
        "needs root, ip and iptables: it makes network namespaces, a bridge and FORWARD rules",
        allow_module_level=True,
    )

ROOT = Path(__file__).resolve().parents[2]
QUEUE = 3
ECHO_PORT = 7007
SINK_PORT = 7008

# B: echo every byte back, one connection at a time.
ECHO = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        while data := conn.recv(4096):
            conn.sendall(data)
"""
# A: N request/response exchanges of 32 bytes, their round trips (seconds) as JSON.
CLIENT = """
import json, socket, sys, time
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for _ in range(int(sys.argv[3])):
    start = time.monotonic()
    conn.sendall(b"x" * 32)
    got = 0
    while got < 32:
        chunk = conn.recv(4096)
        if not chunk:
            raise SystemExit("the echo server closed the connection")
        got += len(chunk)
    rtts.append(time.monotonic() - start)
print(json.dumps(rtts))
"""
# B: count datagrams until none came for 2 s (30 s for the first), print the count.
SINK = """
import socket, sys
sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sink.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
sink.settimeout(30)
count = 0
try:
    while True:
        sink.recv(2048)
        count += 1
        sink.settimeout(2)
except TimeoutError:
    pass
print(count, flush=True)
"""
# A: N datagrams, 2 ms apart.
SEND = """
import socket, sys, time
out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[3])):
    out.sendto(b"%d" % i, (sys.argv[1], int(sys.argv[2])))
    time.sleep(0.002)
"""


def free_subnet() -> ipaddress.IPv4Network:
    """A 10.X.Y.0/24 that no address or route of the root namespace overlaps."""
    shown = subprocess.run(
        ["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True
    ).stdout
    routes = subprocess.run(
        ["ip", "-o", "-4", "route"], capture_output=True, text=True, check=True
    ).stdout
    used = [ipaddress.ip_interface(line.split()[3]).network for line in shown.splitlines()]
    used += [
        ipaddress.ip_network(line.split()[0], strict=False)
        for line in routes.splitlines()
        if line.split()[0] != "default"
    ]
    for _ in range(100):
        subnet = ipaddress.IPv4Network(f"10.{secrets.randbelow(256)}.{secrets.randbelow(256)}.0/24")
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise AssertionError("no free 10.X.Y.0/24 for the test's bridge")


@dataclass
class Lan:
    """Nodes ``a`` and ``b`` on a bridge in namespace ``switch``, and what runs in them."""

    switch: str
    a: str
    b: str
    address: dict[str, str]  # namespace -> its node's address
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def start(self, namespace: str, argv: Sequence[str]) -> subprocess.Popen[str]:
        """Start ``argv`` in ``namespace`` (stopped at teardown), its output on one pipe."""
        process = subprocess.Popen(
            ["ip", "netns", "exec", namespace, *argv],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.processes.append(process)
        return process

    def python(self, namespace: str, script: str, *args: object) -> subprocess.Popen[str]:
        """Start a Python script in ``namespace``."""
        return self.start(namespace, [sys.executable, "-c", script, *map(str, args)])

    def shaper(self, *, delay_ms: float, jitter_ms: float = 0, loss: float = 0) -> Shaper:
        """Start a shaper on QUEUE in the switch namespace; wait until it has bound."""
        argv = [sys.executable, "-m", "outboxkit_workshop.devstack.shaper", "--queue", str(QUEUE)]
        argv += ["--delay-ms", str(delay_ms), "--jitter-ms", str(jitter_ms)]
        argv += ["--loss", str(loss), "--seed", "7"]
        process = self.start(self.switch, argv)
        assert "bound" in first_line(process), "the shaper did not bind its queue"
        return Shaper(process)

    def queue(self, source: str, dest: str, *match: str) -> None:
        """Send the packets from node ``source`` to node ``dest`` to the shaper's queue."""
        src, dst = self.address[source], self.address[dest]
        rule = ["-s", src, "-d", dst, *match, "-j", "NFQUEUE", "--queue-num", str(QUEUE)]
        ip_netns(self.switch, "iptables", "-A", "FORWARD", *rule)


@dataclass
class Shaper:
    """A running shaper process."""

    process: subprocess.Popen[str]

    def stop(self) -> dict[str, int]:
        """SIGTERM it; the counters it printed on exit."""
        self.process.send_signal(signal.SIGTERM)
        output, _ = self.process.communicate(timeout=15)
        assert self.process.returncode == 0, output
        closed = re.search(r"closed \((.*)\)", output)
        assert closed is not None, output
        counters = {k: int(v) for k, v in (p.split("=") for p in closed.group(1).split())}
        held = counters["held"]
        assert counters["seen"] == counters["dropped"] + counters["released"] + held, counters
        return counters


def ip_netns(namespace: str, *argv: str) -> None:
    subprocess.run(["ip", "netns", "exec", namespace, *argv], check=True, capture_output=True)


def first_line(process: subprocess.Popen[str], timeout: float = 15) -> str:
    """The first line ``process`` prints (failing after ``timeout`` s or at its exit)."""
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], timeout)
    assert readable, f"no output from {process.args!r} within {timeout} s"
    line = process.stdout.readline()
    assert line, f"{process.args!r} exited: {process.wait()}"
    return line


def wire(lan: Lan, subnet: ipaddress.IPv4Network) -> None:
    """Make ``lan``'s namespaces, bridge, veth pairs and addresses (the caller deletes them)."""
    hosts = subnet.hosts()
    for namespace in (lan.switch, lan.a, lan.b):
        subprocess.run(["ip", "netns", "add", namespace], check=True)
    ip_netns(lan.switch, "ip", "link", "add", "br0", "type", "bridge")
    ip_netns(lan.switch, "ip", "link", "set", "br0", "up")
    ip_netns(lan.switch, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
    for port, node in (("p-a", lan.a), ("p-b", lan.b)):
        peer = ["peer", "name", "eth0", "netns", node]
        ip_netns(lan.switch, "ip", "link", "add", port, "type", "veth", *peer)
        ip_netns(lan.switch, "ip", "link", "set", port, "master", "br0", "up")
        lan.address[node] = str(next(hosts))
        ip_netns(node, "ip", "addr", "add", f"{lan.address[node]}/24", "dev", "eth0")
        ip_netns(node, "ip", "link", "set", "eth0", "up")


@pytest.fixture
def lan() -> Iterator[Lan]:
    tag = secrets.token_hex(3)
    made = Lan(f"oks-{tag}-sw", f"oks-{tag}-a", f"oks-{tag}-b", {})
    try:
        wire(made, free_subnet())
        yield made
    finally:
        for process in made.processes:  # before the namespaces: they live while a process does
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        for namespace in (made.switch, made.a, made.b):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def round_trips(lan: Lan, count: int) -> list[float]:
    """``count`` round trips of a TCP exchange from node A to an echo server on node B."""
    server = lan.python(lan.b, ECHO, lan.address[lan.b], ECHO_PORT)
    assert first_line(server).strip() == "ready"
    client = lan.python(lan.a, CLIENT, lan.address[lan.b], ECHO_PORT, count)
    output, _ = client.communicate(timeout=120)
    assert client.returncode == 0, output
    return [float(rtt) for rtt in json.loads(output)]


def datagrams(lan: Lan, count: int) -> int:
    """How many of ``count`` UDP datagrams from node A reach node B."""
    sink = lan.python(lan.b, SINK, lan.address[lan.b], SINK_PORT)
    assert first_line(sink).strip() == "ready"
    sender = lan.python(lan.a, SEND, lan.address[lan.b], SINK_PORT, count)
    assert sender.wait(timeout=60) == 0
    output, _ = sink.communicate(timeout=60)
    return int(output)


def test_a_delayed_link_slows_round_trips_by_both_directions(lan: Lan) -> None:
    shaper = lan.shaper(delay_ms=100)
    lan.queue(lan.a, lan.b)
    lan.queue(lan.b, lan.a)
    rtts = round_trips(lan, 20)
    counters = shaper.stop()
    median = statistics.median(rtts)
    print(f"round trip with 100 ms each way: median {median:.3f} s, max {max(rtts):.3f} s")
    assert 0.15 <= median < 2.0, rtts
    assert counters["seen"] >= 40 and counters["dropped"] == 0, counters


def test_a_lossy_link_drops_about_its_share(lan: Lan) -> None:
    shaper = lan.shaper(delay_ms=0, loss=0.5)
    lan.queue(lan.a, lan.b, "-p", "udp", "--dport", str(SINK_PORT))
    received = datagrams(lan, 400)
    counters = shaper.stop()
    print(f"loss 0.5: {received} of 400 datagrams received ({received / 400:.1%})")
    assert 0.3 <= received / 400 <= 0.7, counters
    assert counters["seen"] == 400 and counters["released"] == received, counters


def test_packets_held_at_exit_are_released_not_lost(lan: Lan) -> None:
    shaper = lan.shaper(delay_ms=60_000)  # nothing is due before the shaper stops
    lan.queue(lan.a, lan.b, "-p", "udp", "--dport", str(SINK_PORT))
    sink = lan.python(lan.b, SINK, lan.address[lan.b], SINK_PORT)
    assert first_line(sink).strip() == "ready"
    sender = lan.python(lan.a, SEND, lan.address[lan.b], SINK_PORT, 50)
    assert sender.wait(timeout=60) == 0
    time.sleep(0.5)
    counters = shaper.stop()
    output, _ = sink.communicate(timeout=60)
    assert counters["seen"] == 50 and counters["released_at_exit"] == 50, counters
    assert counters["held"] == 0 and counters["max_held"] == 50, counters
    assert int(output) == 50
