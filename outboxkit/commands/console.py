"""`outboxkit console JOB...`: the operator console, served on loopback unless configured;
`outboxkit console-user NAME --role ROLE`: a line of its users file (a hashed password)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from outboxkit.parsers import NO_SETTINGS, SubParsers, command

if TYPE_CHECKING:
    from outboxkit.settings import Settings


def _console(args: argparse.Namespace, settings: Settings) -> int:
    import socket

    import uvicorn

    from outboxkit.commands.errors import CommandError, load_job
    from outboxkit.console import build_console
    from outboxkit.console.auth import UsersFileError
    from outboxkit.endpoints import resolve

    host = args.host or settings.console_host
    tls = _tls(settings, host)
    sys.path.insert(0, os.getcwd())  # the jobs' modules, as `outboxkit consume` finds them
    jobs = [load_job(spec) for spec in args.jobs]
    try:
        console = build_console(settings, jobs, resolve(settings))
    except UsersFileError as exc:
        raise CommandError(str(exc)) from exc
    port = settings.console_port if args.port is None else args.port
    if port == 0:
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
    scheme = "https" if tls else "http"
    print(f"console: {scheme}://{host}:{port}/ (Ctrl-C stops it)", flush=True)
    if not tls and not loopback(host):
        print(
            f"console: plain HTTP on {host} (OUTBOXKIT_CONSOLE_INSECURE_HTTP): TLS must end in "
            "front of it",
            flush=True,
        )
    try:
        uvicorn.run(
            console.app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            ssl_certfile=tls.get("ssl_certfile"),
            ssl_keyfile=tls.get("ssl_keyfile"),
        )
    finally:
        console.close()
    return 0


def loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or localhost): reachable from this machine only."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may resolve beyond loopback
        return False


def _tls(settings: Settings, host: str) -> dict[str, str]:
    """uvicorn's TLS arguments from the settings; refused: half of them, or plain HTTP beyond
    loopback without the setting that says TLS ends in front of the console."""
    from outboxkit.commands.errors import USAGE, CommandError

    cert, key = settings.console_tls_cert_file, settings.console_tls_key_file
    if (cert is None) != (key is None):
        raise CommandError(
            "the console's TLS needs both OUTBOXKIT_CONSOLE_TLS_CERT_FILE and "
            "OUTBOXKIT_CONSOLE_TLS_KEY_FILE",
            USAGE,
        )
    if cert is not None and key is not None:
        for name, path in (("CERT", cert), ("KEY", key)):
            if not path.is_file():
                raise CommandError(
                    f"OUTBOXKIT_CONSOLE_TLS_{name}_FILE {path} is not a readable file", USAGE
                )
        return {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    if not loopback(host) and not settings.console_insecure_http:
        raise CommandError(
            f"the console would take passwords over plain HTTP on {host}: give "
            "OUTBOXKIT_CONSOLE_TLS_CERT_FILE and OUTBOXKIT_CONSOLE_TLS_KEY_FILE to serve HTTPS, "
            "or set OUTBOXKIT_CONSOLE_INSECURE_HTTP=true where TLS ends in front of it (an "
            "HTTPS proxy, a container port published on loopback)",
            USAGE,
        )
    return {}


def _user(args: argparse.Namespace, settings: None) -> int:
    import getpass

    from outboxkit.console.auth import user_line

    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            print("the passwords differ: nothing written", file=sys.stderr)
            return 1
    line = user_line(args.name, args.role, password)
    path: Path = args.file
    if str(path) == "-":  # the line alone, to append where the users file lives
        print(line)
        return 0
    kept = []
    if path.exists():
        kept = [
            entry for entry in path.read_text().splitlines() if entry.split()[:1] != [args.name]
        ]
    path.write_text("\n".join([*kept, line]) + "\n")
    path.chmod(0o600)
    print(f"{args.name} ({args.role}) written to {path}")
    return 0


def add_parser(sub: SubParsers) -> None:
    console = command(
        sub,
        "console",
        _console,
        help="serve the operator console: lag, failures grouped by cause, where an event is, "
        "and the operator's actions",
        description="Serve the operator console for consumer JOBs (their consumers, databases "
        "and topics) and the connectors, slots and outbox of the settings. Listens on "
        "OUTBOXKIT_CONSOLE_HOST (127.0.0.1 unless set); its users come from "
        "OUTBOXKIT_CONSOLE_USERS_FILE.",
    )
    console.add_argument("jobs", nargs="+", metavar="JOB", help="module:attr of a consumer Job")
    console.add_argument("--host", help="the address to listen on (default: the settings')")
    console.add_argument("--port", type=int, help="the port (0: a free one; default: 8089)")
    user = command(
        sub,
        "console-user",
        _user,
        help="add (or replace) a console user: one NAME ROLE HASH line of its users file",
        settings=NO_SETTINGS,
    )
    user.add_argument("name", metavar="NAME", help="the user's name (one word)")
    user.add_argument(
        "--role",
        choices=("viewer", "operator"),
        required=True,
        help="viewer: reads; operator: also retries, redrives, skips, edits, rewinds, rebases",
    )
    user.add_argument(
        "--file", type=Path, required=True, help="the users file (created 0600); -: print the line"
    )
    user.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin's first line"
    )
