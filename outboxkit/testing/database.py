"""The harness's database: migrated where it is given, or a fresh one on the given server.

A fresh database is a copy of a template (``CREATE DATABASE ... TEMPLATE``, ~0.2 s), which is
migrated once per process and set of migration chains (the framework's and the services' take
~1 s), and dropped when the process exits."""

from __future__ import annotations

import atexit
import contextlib
import threading
import uuid
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import OperationalError

from migrations.runner import Migrations
from outboxkit.kernel.engines import engine_for

_templates: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
_lock = threading.Lock()


def migrate(url: str, chains: Sequence[Migrations]) -> None:
    """Bring every chain of ``chains`` to its head on ``url``, in order (idempotent)."""
    for chain in chains:
        chain.upgrade(url)


def fresh_url(url: str) -> str:
    """The URL of a new database's name on the server of ``url`` (not created yet)."""
    return _rendered(make_url(url).set(database=f"outboxkit_harness_{uuid.uuid4().hex[:12]}"))


def create_fresh(url: str, chains: Sequence[Migrations]) -> None:
    """Create the database of ``url`` (`fresh_url`) with ``chains`` at their heads.

    Args:
        url: The new database's URL (its role must be allowed to create databases).
        chains: The migration chains, the framework's first.
    """
    base = make_url(url)
    chain_key = tuple((str(c.location), c.version_table) for c in chains)
    key = (_rendered(base.set(database="postgres")), chain_key)
    with _lock:
        template = _templates.get(key)
        if template is None:
            template = f"outboxkit_harness_tpl_{uuid.uuid4().hex[:10]}"
            _server_execute(base, f'CREATE DATABASE "{template}"')
            migrate(_rendered(base.set(database=template)), chains)
            if not _templates:
                atexit.register(_drop_templates)
            _templates[key] = template
    _server_execute(base, f'CREATE DATABASE "{base.database}" TEMPLATE "{template}"')


def drop(url: str) -> None:
    """Drop the database of ``url``, whoever is still connected."""
    target = make_url(url)
    _server_execute(target, f'DROP DATABASE IF EXISTS "{target.database}" WITH (FORCE)')


def _drop_templates() -> None:
    for (server, _), name in list(_templates.items()):
        # A server stopped before the process exits took its templates along (and logging may
        # be closed by then: nothing to report).
        with contextlib.suppress(OperationalError):
            _server_execute(make_url(server), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _templates.clear()


def _server_execute(url: URL, statement: str) -> None:
    """Run one statement outside a transaction on the server's ``postgres`` database."""
    server = engine_for(url.set(database="postgres"), "once", isolation_level="AUTOCOMMIT")
    try:
        with server.connect() as conn:
            conn.execute(text(statement))
    finally:
        server.dispose()


def _rendered(url: URL) -> str:
    return url.render_as_string(hide_password=False)
