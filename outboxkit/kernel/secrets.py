"""Passwords read from files (``*_PASSWORD_FILE``, as container secrets are mounted), never from
URLs, plain environment variables or logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from outboxkit.kernel.engines import database_url


class SecretError(RuntimeError):
    """A secret file is missing, unreadable or empty."""


def setting_name(settings: Any, field: str) -> str:
    """The environment variable that sets ``field`` of the settings class (or object)
    ``settings``: its env prefix and the field's name, upper-case."""
    config = settings.model_config  # a class's or an object's: the same
    prefix = str(config.get("env_prefix") or "")
    return f"{prefix}{field}".upper()


def read_secret(path: Path | str, variable: str | None = None) -> str:
    """The secret in ``path``, without its trailing line break.

    Args:
        path: The secret's file (e.g. a mounted container secret).
        variable: The setting that names the file (e.g. ``OUTBOXKIT_DATABASE_PASSWORD_FILE``),
            named in the error.

    Raises:
        SecretError: The file is missing, unreadable or empty.
    """
    named = f"bad setting {variable}: " if variable else ""
    fix = "; expected the file holding the password (a mounted secret)" if variable else ""
    try:
        value = Path(path).read_text().rstrip("\r\n")
    except OSError as exc:
        raise SecretError(
            f"{named}cannot read the secret file {path}: {exc.strerror}{fix}"
        ) from exc
    if not value:
        raise SecretError(f"{named}the secret file {path} is empty{fix}")
    return value


def url_with_password(
    url: str | URL, password_file: Path | str | None, variable: str | None = None
) -> URL:
    """``url`` (as `outboxkit.kernel.engines.database_url` reads it) with the password from
    ``password_file`` (unchanged without one).

    The result is a URL object: ``str()`` and ``repr()`` mask the password, so it never reaches a
    log or an error message by accident.

    Args:
        url: The database URL, without its password.
        password_file: The file holding the password; None leaves ``url`` as it is.
        variable: The setting that names ``password_file``, named in the error.
    """
    parsed = database_url(url)
    if password_file is None:
        return parsed
    return parsed.set(password=read_secret(password_file, variable))
