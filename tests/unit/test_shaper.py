"""The link shaper's pure parts: nfnetlink_queue messages built and parsed byte for byte, the
delay draws, and which packets are held, dropped and released when."""

from __future__ import annotations

import argparse
import errno
import random
import socket
import struct

import pytest

from outboxkit_workshop.devstack.nfqueue import (
    NF_ACCEPT,
    NF_DROP,
    NLM_F_ACK,
    NLM_F_REQUEST,
    NLMSG_ERROR,
    attribute,
    attributes,
    bind_config,
    error_code,
    packet_id,
    parse_messages,
    pf_command,
    verdict_message,
)
from outboxkit_workshop.devstack.shaper import Link, Schedule, queue_number

QUEUE_PACKET = 0x0300  # NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_PACKET
QUEUE_VERDICT = 0x0301
QUEUE_CONFIG = 0x0302


def kernel_packet(packet: int, queue: int = 3, seq: int = 0) -> bytes:
    """An NFQNL_MSG_PACKET as the kernel sends it in copy-meta mode (packet header, mark,
    in/out interfaces, a nested VLAN attribute), built independently of the module."""
    attrs = (
        struct.pack("=HH", 11, 1) + struct.pack("!IHB", packet, 0x0800, 2) + b"\0"  # PACKET_HDR
        + struct.pack("=HH", 8, 3) + struct.pack("!I", 0)  # MARK
        + struct.pack("=HH", 8, 5) + struct.pack("!I", 4)  # IFINDEX_INDEV
        + struct.pack("=HH", 8, 6) + struct.pack("!I", 5)  # IFINDEX_OUTDEV
        + struct.pack("=HH", 4, 0x8000 | 19)  # VLAN, nested, empty
    )  # fmt: skip
    body = struct.pack("!BBH", socket.AF_INET, 0, queue) + attrs
    return struct.pack("=IHHII", 16 + len(body), QUEUE_PACKET, 0, seq, 0) + body


def test_a_verdict_is_one_attribute_of_verdict_and_id_big_endian() -> None:
    expected = (
        struct.pack("=IHHII", 32, QUEUE_VERDICT, NLM_F_REQUEST, 0, 0)
        + struct.pack("!BBH", socket.AF_UNSPEC, 0, 3)
        + struct.pack("=HH", 12, 2)
        + struct.pack("!II", NF_ACCEPT, 0x01020304)
    )
    assert verdict_message(3, 0x01020304, NF_ACCEPT) == expected
    assert verdict_message(3, 9, NF_DROP)[-8:] == struct.pack("!II", NF_DROP, 9)


def test_the_bind_config_binds_copies_metadata_queues_long_and_fails_open() -> None:
    (message,) = parse_messages(bind_config(7, seq=42))
    assert (message.type, message.seq) == (QUEUE_CONFIG, 42)
    assert message.flags == NLM_F_REQUEST | NLM_F_ACK
    assert struct.unpack_from("!BBH", message.body) == (socket.AF_UNSPEC, 0, 7)
    attrs = attributes(message.body)
    assert attrs[1] == struct.pack("!BxH", 1, socket.AF_INET)  # CMD: BIND
    assert attrs[2] == struct.pack("!IB", 0, 1)  # PARAMS: range 0, NFQNL_COPY_META
    assert attrs[3] == struct.pack("!I", 65536)  # QUEUE_MAXLEN
    assert attrs[4] == attrs[5] == struct.pack("!I", 1)  # MASK, FLAGS: FAIL_OPEN


def test_the_pf_commands_name_af_inet_on_queue_zero() -> None:
    (message,) = parse_messages(pf_command(4, seq=1))
    assert struct.unpack_from("!BBH", message.body)[2] == 0
    assert attributes(message.body) == {1: struct.pack("!BxH", 4, socket.AF_INET)}


def test_attributes_are_padded_to_four_bytes() -> None:
    assert attribute(2, b"abcde") == struct.pack("=HH", 9, 2) + b"abcde\0\0\0"
    assert len(attribute(2, b"abcd")) == 8


def test_a_kernel_packet_message_gives_its_id() -> None:
    (message,) = parse_messages(kernel_packet(0xDEADBEEF))
    assert message.type == QUEUE_PACKET
    assert packet_id(message.body) == 0xDEADBEEF
    assert 19 in attributes(message.body)  # the nested flag is masked off the type


def test_one_datagram_holds_several_messages_and_a_truncated_tail_is_ignored() -> None:
    data = kernel_packet(1) + kernel_packet(2) + kernel_packet(3)[:20]
    assert [packet_id(m.body) for m in parse_messages(data)] == [1, 2]


def test_a_message_without_a_packet_header_has_no_id() -> None:
    body = struct.pack("!BBH", 0, 0, 3) + struct.pack("=HH", 8, 3) + b"\0\0\0\0"
    assert packet_id(body) is None


def test_an_error_message_gives_its_errno_and_an_ack_zero() -> None:
    request = bind_config(3, seq=5)[:16]
    for code in (0, errno.EPERM, errno.EBUSY):
        body = struct.pack("=i", -code) + request
        raw = struct.pack("=IHHII", 16 + len(body), NLMSG_ERROR, 0, 5, 0) + body
        (message,) = parse_messages(raw)
        assert (message.type, message.seq, error_code(message.body)) == (NLMSG_ERROR, 5, code)


def test_a_link_holds_within_its_jitter_and_never_below_zero() -> None:
    rng = random.Random(1)
    holds = [Link(0.2, 0.05).hold(rng) for _ in range(2000)]
    assert all(0.15 <= h <= 0.25 for h in holds)
    assert min(holds) < 0.16 and max(holds) > 0.24  # the whole range is drawn from
    assert all(Link(0.01, 0.05).hold(rng) >= 0 for _ in range(2000))
    assert Link(0.1).hold(rng) == 0.1


@pytest.mark.parametrize("bad", [{"delay": -0.1}, {"jitter": -0.01}, {"loss": 1.5}, {"loss": -0.1}])
def test_a_link_rejects_negative_times_and_a_loss_outside_zero_to_one(
    bad: dict[str, float],
) -> None:
    with pytest.raises(ValueError, match=r"loss within 0\.\.1"):
        Link(**bad)


def test_a_link_describes_itself_in_milliseconds() -> None:
    assert Link(0.2, 0.05, 0.01).describe() == "delay 200 ms ± 50 ms, loss 1.0%"


def test_the_schedule_releases_each_packet_after_its_delay() -> None:
    schedule = Schedule(Link(0.1), random.Random(0))
    assert schedule.admit(1, now=10.0) and schedule.admit(2, now=10.05)
    assert schedule.due(10.09) == []
    assert schedule.next_due() == pytest.approx(10.1)
    assert schedule.due(10.1) == [1]
    assert schedule.due(11.0) == [2]
    assert schedule.next_due() is None
    counters = schedule.counters
    assert (counters.seen, counters.released, counters.dropped, counters.max_held) == (2, 2, 0, 2)


def test_jitter_may_release_a_later_packet_first() -> None:
    schedule = Schedule(Link(0.1, 0.1), random.Random(3))
    for packet in range(50):
        schedule.admit(packet, now=0.0)
    released = schedule.due(1.0)
    assert sorted(released) == list(range(50)) and released != list(range(50))


def test_a_lossy_schedule_drops_about_its_share_and_the_counters_add_up() -> None:
    schedule = Schedule(Link(0.0, loss=0.3), random.Random(5))
    kept = [p for p in range(10_000) if schedule.admit(p, now=0.0)]
    counters = schedule.counters
    assert 0.27 < counters.dropped / 10_000 < 0.33
    assert schedule.due(0.0, limit=100) == kept[:100]
    assert counters.seen == counters.dropped + counters.released + schedule.held


def test_a_link_that_loses_everything_holds_nothing() -> None:
    schedule = Schedule(Link(0.1, loss=1.0), random.Random(0))
    assert not any(schedule.admit(p, now=0.0) for p in range(100))
    assert schedule.held == 0 and schedule.counters.dropped == 100


def test_a_queue_number_is_sixteen_bits() -> None:
    assert queue_number("65535") == 65535
    with pytest.raises(argparse.ArgumentTypeError, match="not a queue number"):
        queue_number("65536")
