"""Exceptions raised by the outbox package, and how to tell an unreachable database."""

from collections.abc import Iterator


class OutboxError(Exception):
    """Base class of every error raised by the outbox package."""


class InvalidEvent(OutboxError, ValueError):
    """An event was rejected before it reached the transaction; the message says which field."""


def is_transient(exc: BaseException) -> bool:
    """True for errors of reaching the database (down, restarting, failing over, connection
    lost, pool exhausted, serialisation failure): retrying later can succeed, so a consumer
    retries the batch (nothing is parked for it) and a service answers 503, not 500. Looks
    through the exception's causes: an invalidated connection often surfaces as another error
    (e.g. a session that cannot roll back a transaction whose connection is gone).

    Args:
        exc: The error raised, with its causes.
    """
    from sqlalchemy.exc import (
        DBAPIError,
        DisconnectionError,
        InterfaceError,
        OperationalError,
        PendingRollbackError,
    )
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    unreachable = (
        OperationalError,
        InterfaceError,
        PoolTimeout,
        DisconnectionError,
        ConnectionError,
        TimeoutError,
    )
    for current in causes(exc):
        if isinstance(current, DBAPIError) and current.connection_invalidated:
            return True
        if isinstance(current, unreachable):
            return True
        if isinstance(current, PendingRollbackError) and "reconnect" in str(current):
            return True  # "Can't reconnect until invalid transaction is rolled back"
    return False


def causes(exc: BaseException, *, implicit: bool = True) -> Iterator[BaseException]:
    """``exc``, then its causes: the explicit one (``raise ... from``), else, when
    ``implicit``, the exception being handled when it was raised; each once.

    Args:
        exc: The error raised.
        implicit: Follow ``__context__`` where there is no ``__cause__``.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (current.__context__ if implicit else None)
