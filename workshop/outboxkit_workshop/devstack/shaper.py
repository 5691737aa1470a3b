"""A slow, lossy link made in user space, for a kernel without ``netem``: iptables sends the
link's packets to an NFQUEUE; this nfnetlink_queue listener holds each for the link's delay
(± jitter) and then accepts it, or drops a ``loss`` share of them at once.

The queue is bound fail-open: a packet that finds the kernel's queue full (65536 held) or this
socket's receive buffer full is accepted undelayed by the kernel, not dropped, so an overloaded
shaper makes a link faster, never lossier than asked. On close (SIGTERM) every packet held or
waiting to be read is accepted, so healing a link loses nothing in flight; only a packet queued
in the instant between that last read and the socket's close is dropped by the kernel (remove
the iptables rule first, as healing does), and once closed, the queue's packets pass only if the
rule has ``--queue-bypass``. Loss is drawn per packet, independently; jitter reorders packets,
as netem's does without a rate.

``python -m outboxkit_workshop.devstack.shaper --queue N --delay-ms D --jitter-ms J --loss P
[--seed S]``
(root, in the namespace whose FORWARD chain queues the packets)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import heapq
import itertools
import os
import random
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from outboxkit_workshop.devstack import nfqueue

RECEIVE_BUFFER = 16 * 1024 * 1024
MAX_WAIT = 0.05  # seconds between looks at the stop event when nothing is due
BATCH = 512  # messages read, verdicts sent, per round: releases are never starved by arrivals


class ShaperError(RuntimeError):
    """The queue could not be bound; the message says what to do."""


@dataclass(frozen=True)
class Link:
    """A link's delay and jitter (seconds, uniform in ±jitter) and loss probability."""

    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0

    def __post_init__(self) -> None:
        if self.delay < 0 or self.jitter < 0 or not 0 <= self.loss <= 1:
            raise ValueError(f"{self}: delay and jitter must be >= 0, loss within 0..1")

    def hold(self, rng: random.Random) -> float:
        """How long one packet is held: delay ± jitter, never below 0."""
        return max(0.0, self.delay + rng.uniform(-self.jitter, self.jitter))

    def describe(self) -> str:
        """``delay 200 ms ± 50 ms, loss 1.0%``."""
        return f"delay {self.delay * 1000:g} ms ± {self.jitter * 1000:g} ms, loss {self.loss:.1%}"


@dataclass
class Counters:
    """What a shaper did: packets seen, dropped, released (accepted), the most held at once."""

    seen: int = 0
    dropped: int = 0
    released: int = 0
    released_at_exit: int = 0
    max_held: int = 0
    overruns: int = 0  # ENOBUFS: the kernel could not queue a message to us (fail-open accepted)
    errors: int = 0  # NLMSG_ERROR answers to verdicts


class Schedule:
    """Which packets are held until when: admits or drops each, gives back those due."""

    def __init__(self, link: Link, rng: random.Random) -> None:
        self.link = link
        self.rng = rng
        self.counters = Counters()
        self._heap: list[tuple[float, int, int]] = []  # (due, arrival order, packet id)
        self._order = itertools.count()

    @property
    def held(self) -> int:
        """Packets held now."""
        return len(self._heap)

    def admit(self, packet: int, now: float) -> bool:
        """Hold ``packet`` until its release time; False: drop it now (lost)."""
        self.counters.seen += 1
        if self.link.loss and self.rng.random() < self.link.loss:
            self.counters.dropped += 1
            return False
        heapq.heappush(self._heap, (now + self.link.hold(self.rng), next(self._order), packet))
        self.counters.max_held = max(self.counters.max_held, len(self._heap))
        return True

    def next_due(self) -> float | None:
        """When the next held packet is due (None: none held)."""
        return self._heap[0][0] if self._heap else None

    def due(self, now: float, limit: int = BATCH) -> list[int]:
        """The ids of up to ``limit`` packets due by ``now``, counted as released."""
        ids: list[int] = []
        while self._heap and self._heap[0][0] <= now and len(ids) < limit:
            ids.append(heapq.heappop(self._heap)[2])
        self.counters.released += len(ids)
        return ids


class Shaper:
    """An nfnetlink_queue listener bound to queue ``queue`` of the current network namespace."""

    def __init__(self, queue: int, link: Link, *, seed: int | None = None) -> None:
        self.queue = queue
        self.schedule = Schedule(link, random.Random(seed))
        self._seq = itertools.count(1)
        self._acks: dict[int, int] = {}  # seq -> errno of the kernel's answer
        self._buffer = bytearray(65536)
        try:
            self._sock = socket.socket(
                socket.AF_NETLINK, socket.SOCK_RAW, nfqueue.NETLINK_NETFILTER
            )
        except OSError as exc:
            raise ShaperError(f"no netfilter netlink socket ({exc.strerror})") from exc
        try:
            self._bind()
        except BaseException:
            self._sock.close()
            raise

    @property
    def counters(self) -> Counters:
        """The shaper's counters so far."""
        return self.schedule.counters

    def _bind(self) -> None:
        self._sock.bind((0, 0))
        self._sock.setblocking(False)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, nfqueue.SO_RCVBUFFORCE, RECEIVE_BUFFER)
        except OSError:  # not permitted: as large as net.core.rmem_max allows
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        with contextlib.suppress(OSError):  # unknown option: ENOBUFS is reported, and survived
            self._sock.setsockopt(nfqueue.SOL_NETLINK, nfqueue.NETLINK_NO_ENOBUFS, 1)
        for command in (nfqueue.NFQNL_CFG_CMD_PF_UNBIND, nfqueue.NFQNL_CFG_CMD_PF_BIND):
            if self._request(functools.partial(nfqueue.pf_command, command)) == errno.EPERM:
                raise ShaperError("binding an NFQUEUE needs root (CAP_NET_ADMIN): run as root")
        code = self._request(functools.partial(nfqueue.bind_config, self.queue))
        if code in (errno.EPERM, errno.EBUSY):
            raise ShaperError(
                f"queue {self.queue} is bound by another process: stop it or pick another --queue"
            )
        if code:
            raise ShaperError(f"binding queue {self.queue} failed: {os.strerror(code)}")

    def _request(self, build: Callable[[int], bytes], timeout: float = 5.0) -> int:
        """Send a config message and wait for its acknowledgement; its errno (0: done)."""
        seq = next(self._seq)
        self._sock.sendto(build(seq), (0, 0))
        deadline = time.monotonic() + timeout
        while seq not in self._acks:
            if time.monotonic() > deadline:
                raise ShaperError(f"the kernel did not answer a queue {self.queue} config message")
            select.select([self._sock], [], [], MAX_WAIT)
            self._receive()
        return self._acks.pop(seq)

    def run(self, stop: threading.Event) -> None:
        """Hold, drop and release packets until ``stop`` is set."""
        while not stop.is_set():
            self.step(MAX_WAIT)

    def step(self, max_wait: float) -> None:
        """Release what is due, wait for packets (at most ``max_wait`` s), admit them."""
        now = time.monotonic()
        self._send(
            [
                nfqueue.verdict_message(self.queue, i, nfqueue.NF_ACCEPT)
                for i in self.schedule.due(now)
            ]
        )
        due = self.schedule.next_due()
        wait = max_wait if due is None else min(max_wait, max(0.0, due - time.monotonic()))
        readable, _, _ = select.select([self._sock], [], [], wait)
        if readable:
            self._receive()

    def _receive(self) -> int:
        """Read up to BATCH waiting datagrams (their count): admit packets, note answers."""
        drops: list[bytes] = []
        packet_type = (nfqueue.NFNL_SUBSYS_QUEUE << 8) | nfqueue.NFQNL_MSG_PACKET
        for read in range(BATCH):
            try:
                size = self._sock.recv_into(self._buffer)
            except BlockingIOError:
                self._send(drops)
                return read
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                self.counters.overruns += 1  # the kernel accepted what it could not queue
                continue
            now = time.monotonic()
            for message in nfqueue.parse_messages(bytes(self._buffer[:size])):
                if message.type == nfqueue.NLMSG_ERROR:
                    self._acknowledged(message)
                elif message.type == packet_type:
                    packet = nfqueue.packet_id(message.body)
                    if packet is not None and not self.schedule.admit(packet, now):
                        drops.append(nfqueue.verdict_message(self.queue, packet, nfqueue.NF_DROP))
        self._send(drops)
        return BATCH

    def _acknowledged(self, message: nfqueue.Message) -> None:
        code = nfqueue.error_code(message.body)
        if message.seq:  # an answer to a config request (verdicts are sent with seq 0)
            self._acks[message.seq] = code
        elif code:
            self.counters.errors += 1  # a verdict the kernel refused (its packet is gone)

    def _send(self, messages: list[bytes]) -> None:
        # Many messages in one datagram: the kernel processes each of them in turn.
        for start in range(0, len(messages), BATCH):
            self._sock.sendto(b"".join(messages[start : start + BATCH]), (0, 0))

    def close(self) -> None:
        """Accept every packet held (and waiting to be read), then unbind by closing."""
        if self._sock.fileno() < 0:
            return
        while self._receive() == BATCH:
            pass
        everything = float("inf")
        while self.schedule.held:
            ids = self.schedule.due(everything)
            self.counters.released_at_exit += len(ids)
            self._send([nfqueue.verdict_message(self.queue, i, nfqueue.NF_ACCEPT) for i in ids])
        self._sock.close()


def queue_number(text: str) -> int:
    """An NFQUEUE number, 0..65535 (for argparse)."""
    number = int(text)
    if not 0 <= number <= 0xFFFF:
        raise argparse.ArgumentTypeError(f"{number} is not a queue number (0..65535)")
    return number


def main(argv: list[str] | None = None) -> int:
    """``python -m outboxkit_workshop.devstack.shaper``: shape queue N until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m outboxkit_workshop.devstack.shaper", description=__doc__
    )
    parser.add_argument("--queue", type=queue_number, required=True, help="NFQUEUE number")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="delay of every packet")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="uniform ± around the delay")
    parser.add_argument("--loss", type=float, default=0.0, help="share of packets dropped, 0..1")
    parser.add_argument("--seed", type=int, default=None, help="seed of the jitter and loss draws")
    args = parser.parse_args(argv)
    try:
        link = Link(args.delay_ms / 1000, args.jitter_ms / 1000, args.loss)
    except ValueError as exc:
        parser.error(str(exc))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        shaper = Shaper(args.queue, link, seed=args.seed)
    except ShaperError as exc:
        print(f"shaper: {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"shaper: queue {args.queue} bound ({link.describe()})", flush=True)
    try:
        shaper.run(stop)
    finally:
        shaper.close()
        c = shaper.counters
        print(
            f"shaper: queue {args.queue} closed (seen={c.seen} dropped={c.dropped} "
            f"released={c.released} held={shaper.schedule.held} max_held={c.max_held} "
            f"released_at_exit={c.released_at_exit} overruns={c.overruns} errors={c.errors})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
