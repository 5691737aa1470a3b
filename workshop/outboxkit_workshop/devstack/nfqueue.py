"""nfnetlink_queue's wire format, as the link shaper (`outboxkit_workshop.devstack.shaper`) speaks
it:
the netlink and nfnetlink_queue constants, messages built (a queue bound fail-open with
metadata-only copies, a verdict) and parsed (a datagram's messages, an attribute list, a
packet's id, an error's errno). Pure: no socket is opened here."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import NamedTuple

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33  # asm-generic value (x86, arm); socket has no constant for it
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_PF_BIND, NFQNL_CFG_CMD_PF_UNBIND = 1, 3, 4
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN = 1
NF_DROP, NF_ACCEPT = 0, 1
QUEUE_MAXLEN = 65536

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, portid (host order)
_NFGEN = struct.Struct("!BBH")  # nfgenmsg: family, version, res_id (the queue, big-endian)
_ATTR = struct.Struct("=HH")  # nlattr: length, type (host order); payloads big-endian
_ATTR_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER


class Message(NamedTuple):
    """One netlink message: its type, flags, sequence number and body (after the header)."""

    type: int
    flags: int
    seq: int
    body: bytes


def attribute(kind: int, payload: bytes) -> bytes:
    """A netlink attribute (TLV), padded to 4 bytes."""
    raw = _ATTR.pack(_ATTR.size + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def queue_message(msg: int, queue: int, attrs: bytes, *, seq: int = 0, flags: int = 0) -> bytes:
    """An nfnetlink_queue message: netlink header, nfgenmsg for ``queue``, attributes."""
    body = _NFGEN.pack(socket.AF_UNSPEC, 0, queue) + attrs
    kind = (NFNL_SUBSYS_QUEUE << 8) | msg
    return _HEADER.pack(_HEADER.size + len(body), kind, NLM_F_REQUEST | flags, seq, 0) + body


def pf_command(command: int, seq: int) -> bytes:
    """NFQNL_CFG_CMD_PF_(UN)BIND for AF_INET (no-ops since Linux 3.8, needed before)."""
    cmd = struct.pack("!BxH", command, socket.AF_INET)
    return queue_message(
        NFQNL_MSG_CONFIG, 0, attribute(NFQA_CFG_CMD, cmd), seq=seq, flags=NLM_F_ACK
    )


def bind_config(queue: int, seq: int) -> bytes:
    """Bind ``queue`` and, in the same message, set metadata-only copies, a long queue and
    fail-open (the kernel applies all of it before the next packet is queued)."""
    attrs = b"".join(
        (
            attribute(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, socket.AF_INET)),
            attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)),
            attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN)),
            attribute(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN)),
            attribute(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN)),
        )
    )
    return queue_message(NFQNL_MSG_CONFIG, queue, attrs, seq=seq, flags=NLM_F_ACK)


def verdict_message(queue: int, packet_id: int, verdict: int) -> bytes:
    """The verdict (NF_ACCEPT or NF_DROP) on packet ``packet_id`` of ``queue``."""
    header = attribute(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id))
    return queue_message(NFQNL_MSG_VERDICT, queue, header)


def parse_messages(data: bytes) -> Iterator[Message]:
    """The netlink messages of one datagram (a truncated tail is ignored)."""
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, flags, seq, _ = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size or offset + length > len(data):
            return
        yield Message(kind, flags, seq, data[offset + _HEADER.size : offset + length])
        offset += (length + 3) & ~3


def attributes(body: bytes) -> dict[int, bytes]:
    """The attributes of an nfnetlink message body (after its nfgenmsg), by type."""
    found: dict[int, bytes] = {}
    offset = _NFGEN.size
    while offset + _ATTR.size <= len(body):
        length, kind = _ATTR.unpack_from(body, offset)
        if length < _ATTR.size or offset + length > len(body):
            break
        found[kind & _ATTR_TYPE_MASK] = body[offset + _ATTR.size : offset + length]
        offset += (length + 3) & ~3
    return found


def packet_id(body: bytes) -> int | None:
    """The packet id of an NFQNL_MSG_PACKET body (None without NFQA_PACKET_HDR)."""
    header = attributes(body).get(NFQA_PACKET_HDR)
    return None if header is None or len(header) < 4 else int(struct.unpack_from("!I", header)[0])


def error_code(body: bytes) -> int:
    """The errno of an NLMSG_ERROR body (0: an acknowledgement)."""
    return -int(struct.unpack_from("=i", body)[0])
