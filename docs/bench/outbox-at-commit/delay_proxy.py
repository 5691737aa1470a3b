"""A TCP forwarder that delays every chunk by a fixed time in each direction: a database one
network hop away (same zone: ~0.2-0.5 ms round trip) instead of on loopback, for
`ab_writes.py`. Usage: python delay_proxy.py LISTEN_PORT TARGET_PORT DELAY_US (loopback both).
One thread per direction per connection; the delay is a sleep before forwarding (nanosleep,
~60 us of slack on this machine), so a round trip gains about twice DELAY_US."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time


def pipe(source: socket.socket, sink: socket.socket, delay: float) -> None:
    try:
        while chunk := source.recv(65536):
            time.sleep(delay)
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def main() -> None:
    listen, target, delay = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) / 1e6
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen))
    server.listen(64)
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection(("127.0.0.1", target))
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pipe, args=(client, upstream, delay), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client, delay), daemon=True).start()


if __name__ == "__main__":
    main()
