"""Where the stack's nodes run on the network: on loopback (the default), or each in a Linux
network namespace of its own, with its own address on a bridge, so that the links between any
two groups of nodes can be cut (both ways or one way), slowed and made lossy, and healed.

The partitionable network (``OUTBOXKIT_NETWORK=namespaces``, root only):

- a *switch* namespace holds a bridge; each node's namespace is joined to it by a veth pair and
  gets the address ``<subnet>.N`` of a private /24; the namespace that runs the tools (tests,
  ``outboxkit`` commands) joins it too, as ``<subnet>.1``. There is no uplink, route or NAT out
  of the bridge: no packet of the stack leaves the namespaces made here.
- a link is cut with iptables in the switch namespace (bridged IPv4 traverses its FORWARD chain):
  every packet from one group to the other is dropped, as a network partition drops it, so a
  connection hangs until its own timeouts notice. A slow or lossy link sends its packets to an
  NFQUEUE where `outboxkit_workshop.devstack.shaper` holds each for its delay, drops a share, and
  releases
  the rest (it needs no ``netem`` qdisc, which many kernels are built without).
- `Network.destroy` stops the shapers and deletes every namespace and the bridge; a stack's
  `down` calls it once its processes are stopped.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from outboxkit_workshop.devstack.processes import (
    LOOPBACK_ADDRESS,
    Host,
    StackError,
    start,
    stop,
    wait_until,
)

NETWORKS = ("loopback", "namespaces")
# The address the tools' own namespace has on the bridge (the root namespace: tests, CLI).
TOOLS = "tools"
TOOLS_OCTET = 1
BRIDGE = "br0"
# Each node's end of its veth pair, inside its namespace.
NODE_INTERFACE = "eth0"


class NetworkError(StackError):
    """The partitionable network cannot be made or changed here (not root, a tool missing)."""


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {result.stderr.strip() or result.stdout.strip()}")
    return result


def _veth(name: str, namespace: str | None, port: str, switch: str) -> None:
    """A veth pair: ``name`` in ``namespace`` (None: this one), its peer ``port`` in ``switch``."""
    where = ["netns", namespace] if namespace else []
    _run("ip", "link", "add", name, *where, "type", "veth", "peer", "name", port, "netns", switch)


def unavailable() -> str | None:
    """Why the partitionable network cannot be made on this machine, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns, iptables)"
    for tool in ("ip", "iptables", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-system.sh installs it)"
    return None


def _free_subnet() -> str:
    """A private /24 (``10.X.Y``) no interface of this namespace is on."""
    taken = [
        ipaddress.ip_interface(word).network
        for line in _run("ip", "-o", "-4", "addr").stdout.splitlines()
        for word in line.split()[3:4]
    ]
    # Nor a destination this namespace routes elsewhere (a VPN's, a static route's).
    taken += [
        ipaddress.ip_network(word, strict=False)
        for line in _run("ip", "-4", "route").stdout.splitlines()
        for word in line.split()[:1]
        if word != "default"
    ]
    for _ in range(200):
        prefix = f"10.{secrets.randbelow(200) + 40}.{secrets.randbelow(250) + 1}"
        candidate = ipaddress.ip_network(f"{prefix}.0/24")
        if not any(candidate.overlaps(net) for net in taken):
            return prefix
    raise NetworkError("no free private /24 for the stack's network")


@dataclass(frozen=True)
class LinkRule:
    """One rule between two groups of nodes: ``cut`` drops their packets; else the packets go
    through a shaper (delay ± jitter seconds, ``loss`` share dropped). ``oneway``: only the
    packets from ``sources`` to ``targets``."""

    sources: tuple[str, ...]
    targets: tuple[str, ...]
    oneway: bool = False
    cut: bool = True
    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0

    def describe(self) -> str:
        arrow = "->" if self.oneway else "<->"
        what = (
            "cut"
            if self.cut
            else f"delay {self.delay * 1000:.0f}±{self.jitter * 1000:.0f} ms, loss {self.loss:.1%}"
        )
        return f"{'+'.join(self.sources)} {arrow} {'+'.join(self.targets)}: {what}"


def rule_of(raw: dict[str, Any]) -> LinkRule:
    """A rule as recorded (lists for tuples)."""
    return LinkRule(**{**raw, "sources": tuple(raw["sources"]), "targets": tuple(raw["targets"])})


@dataclass
class Network:
    """The partitionable network of one stack: its id (in every name it makes), its /24, the
    nodes' host octets, and the shapers running for slow links (PID by queue number)."""

    id: str
    subnet: str
    logs: str = ""  # where the shapers' logs go
    nodes: dict[str, int] = field(default_factory=dict)
    shapers: dict[int, int] = field(default_factory=dict)
    rules: list[dict[str, Any]] = field(default_factory=list)

    # -- names ------------------------------------------------------------------------------
    @property
    def switch(self) -> str:
        return f"ok{self.id}-switch"

    @property
    def tools_interface(self) -> str:
        return f"ok{self.id}"  # in the tools' namespace: at most 15 characters

    def namespace(self, node: str) -> str:
        return f"ok{self.id}-{node}"

    def address(self, node: str) -> str:
        if node == TOOLS:
            return f"{self.subnet}.{TOOLS_OCTET}"
        return f"{self.subnet}.{self.nodes[node]}"

    def network(self) -> str:
        return f"{self.subnet}.0/24"

    # -- making it ----------------------------------------------------------------------------
    @classmethod
    def create(cls, logs: Path) -> Network:
        """A new network: the switch namespace with its bridge, and the tools' namespace on it."""
        why = unavailable()
        if why:
            raise NetworkError(f"the partitionable network cannot be made here: {why}")
        net = cls(id=secrets.token_hex(3), subnet=_free_subnet(), logs=str(logs))
        try:
            _run("ip", "netns", "add", net.switch)
            _run("ip", "-n", net.switch, "link", "set", "lo", "up")
            _run("ip", "-n", net.switch, "link", "add", BRIDGE, "type", "bridge")
            _run("ip", "-n", net.switch, "link", "set", BRIDGE, "up")
            # Bridged IPv4 goes through the switch's iptables FORWARD chain: cuts and shaping.
            _run(
                "ip",
                "netns",
                "exec",
                net.switch,
                "sysctl",
                "-q",
                "-w",
                "net.bridge.bridge-nf-call-iptables=1",
            )
            port = f"p{TOOLS_OCTET}"
            _veth(net.tools_interface, None, port, net.switch)
            _run("ip", "-n", net.switch, "link", "set", port, "master", BRIDGE, "up")
            _run("ip", "addr", "add", f"{net.address(TOOLS)}/24", "dev", net.tools_interface)
            _run("ip", "link", "set", net.tools_interface, "up")
        except BaseException:
            net.destroy()
            raise
        return net

    def host(self, node: str) -> Host:
        """Node ``node``'s host, its namespace made and joined to the bridge the first time."""
        if node == TOOLS:
            return Host(self.address(TOOLS))
        namespace = self.namespace(node)
        if node not in self.nodes:
            self.nodes[node] = max([TOOLS_OCTET, *self.nodes.values()]) + 1
            if self.nodes[node] > 254:
                raise NetworkError(f"the stack's network is full: no address for {node}")
        if not Path(f"/run/netns/{namespace}").exists():
            self._join(node, namespace)
        return Host(self.address(node), namespace)

    def _join(self, node: str, namespace: str) -> None:
        try:
            self._link(node, namespace)
        except BaseException:
            _run("ip", "netns", "del", namespace, check=False)  # no half-made node left
            raise

    def _link(self, node: str, namespace: str) -> None:
        port = f"p{self.nodes[node]}"
        _run("ip", "netns", "add", namespace)
        _run("ip", "-n", self.switch, "link", "del", port, check=False)  # a node made again
        _veth(NODE_INTERFACE, namespace, port, self.switch)
        _run("ip", "-n", self.switch, "link", "set", port, "master", BRIDGE, "up")
        _run("ip", "-n", namespace, "link", "set", "lo", "up")
        address = f"{self.address(node)}/24"
        _run("ip", "-n", namespace, "addr", "add", address, "dev", NODE_INTERFACE)
        _run("ip", "-n", namespace, "link", "set", NODE_INTERFACE, "up")

    # -- links ----------------------------------------------------------------------------------
    def _addresses(self, nodes: Iterable[str]) -> list[str]:
        found = []
        for node in nodes:
            if node != TOOLS and node not in self.nodes:
                raise NetworkError(f"no node {node!r} on this network ({', '.join(self.nodes)})")
            found.append(self.address(node))
        return found

    def _iptables(self, *args: str) -> None:
        _run("ip", "netns", "exec", self.switch, "iptables", "-w", *args)

    def _pairs(self, rule: LinkRule) -> list[tuple[str, str]]:
        sources, targets = self._addresses(rule.sources), self._addresses(rule.targets)
        pairs = [(s, t) for s in sources for t in targets if s != t]
        if not rule.oneway:
            pairs += [(t, s) for s, t in pairs]
        return pairs

    def cut(self, sources: Sequence[str], targets: Sequence[str], *, oneway: bool = False) -> None:
        """Drop every packet from ``sources`` to ``targets`` (and back, unless ``oneway``)."""
        self.apply(LinkRule(tuple(sources), tuple(targets), oneway=oneway))

    def slow(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        *,
        delay: float,
        jitter: float = 0.0,
        loss: float = 0.0,
        oneway: bool = False,
    ) -> None:
        """Delay the packets between the groups by ``delay`` ± ``jitter`` seconds and drop a
        ``loss`` share of them (a shaper in the switch namespace holds them)."""
        rule = LinkRule(tuple(sources), tuple(targets), oneway, False, delay, jitter, loss)
        self.apply(rule)

    def apply(self, rule: LinkRule) -> None:
        """Add ``rule`` to the links' rules (they stay until `heal`)."""
        pairs = self._pairs(rule)
        if rule.cut:
            target = ["-j", "DROP"]
        else:
            queue = max([0, *self.shapers]) + 1
            self.shapers[queue] = self._start_shaper(queue, rule)
            # --queue-bypass: should its shaper be gone, the link passes rather than drops.
            target = ["-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass"]
        for source, dest in pairs:
            self._iptables("-A", "FORWARD", "-s", source, "-d", dest, *target)
        self.rules.append(asdict(rule))

    def _start_shaper(self, queue: int, rule: LinkRule) -> int:
        log = self._shaper_log(queue)
        seen = log.stat().st_size if log.exists() else 0  # the log is appended to
        argv = [
            sys.executable,
            "-m",
            "outboxkit_workshop.devstack.shaper",
            "--queue",
            str(queue),
            "--delay-ms",
            f"{rule.delay * 1000:.3f}",
            "--jitter-ms",
            f"{rule.jitter * 1000:.3f}",
            "--loss",
            str(rule.loss),
        ]
        pid = start(f"shaper {queue}", Host(namespace=self.switch).wrap(argv)[0], log=log)

        def bound() -> bool:
            with log.open("rb") as text:
                text.seek(seen)
                return f"queue {queue} bound (".encode() in text.read()

        try:
            wait_until(f"shaper {queue}", bound, timeout=15, pid=pid, log=log)
        except BaseException:
            stop(pid, timeout=5)
            raise
        return pid

    def heal(self) -> list[str]:
        """Remove every rule: every link passes again; packets a shaper held are released
        before it exits. Returns the rules healed, described."""
        healed = [rule_of(raw) for raw in self.rules]
        if self.exists():
            self._iptables("-F", "FORWARD")
        self._stop_shapers()
        self.rules.clear()
        return [rule.describe() for rule in healed]

    def _stop_shapers(self) -> None:
        """Stop the recorded shapers that still run one (a PID recorded before a reboot may
        be another program's now: never signalled)."""
        for pid in self.shapers.values():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"outboxkit_workshop.devstack.shaper" in argv:
                stop(pid, timeout=10)
        self.shapers.clear()

    # -- taking it down -------------------------------------------------------------------------
    def destroy(self) -> None:
        """Stop the shapers, then delete every namespace, veth pair and the bridge made here
        (the processes in the namespaces must be stopped first: a namespace lives on while a
        process runs in it)."""
        self._stop_shapers()
        self.rules.clear()
        for name in {*(self.namespace(node) for node in self.nodes), *self.leftovers()}:
            _run("ip", "netns", "del", name, check=False)
        _run("ip", "link", "del", self.tools_interface, check=False)
        _run("ip", "netns", "del", self.switch, check=False)

    def exists(self) -> bool:
        """True while the switch namespace exists (not after a reboot or a `destroy`)."""
        return Path(f"/run/netns/{self.switch}").exists()

    def leftovers(self) -> list[str]:
        """The namespaces of this network that still exist (empty once destroyed)."""
        listed = _run("ip", "netns", "list", check=False).stdout.split()
        return [name for name in listed if name.startswith(f"ok{self.id}-")]

    def _shaper_log(self, queue: int) -> Path:
        return Path(self.logs) / f"shaper-{queue}.log"

    # -- recorded in the stack's state file --------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Network:
        return cls(
            id=raw["id"],
            subnet=raw["subnet"],
            logs=raw.get("logs", ""),
            nodes=dict(raw.get("nodes", {})),
            shapers={int(k): v for k, v in raw.get("shapers", {}).items()},
            rules=list(raw.get("rules", [])),
        )


def address_of(recorded: dict[str, Any] | None, node: str) -> str:
    """Node ``node``'s address by a stack state's network record (None: loopback)."""
    if not recorded or node not in recorded.get("nodes", {}):
        return LOOPBACK_ADDRESS
    return f"{recorded['subnet']}.{recorded['nodes'][node]}"
