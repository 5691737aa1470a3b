"""Exceptions raised by the outbox package."""


class OutboxError(Exception):
    """Base class of every error raised by the outbox package."""


class InvalidEvent(OutboxError, ValueError):
    """An event was rejected before it reached the transaction; the message says which field."""
