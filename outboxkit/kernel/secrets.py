"""Passwords read from files (``*_PASSWORD_FILE``, as container secrets are mounted), never from
URLs, plain environment variables or logs."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import URL, make_url


class SecretError(RuntimeError):
    """A secret file is missing, unreadable or empty."""


def read_secret(path: Path | str) -> str:
    """The secret in ``path``, without its trailing line break.

    Args:
        path: The secret's file (e.g. a mounted container secret).

    Raises:
        SecretError: The file is missing, unreadable or empty.
    """
    try:
        value = Path(path).read_text().rstrip("\r\n")
    except OSError as exc:
        raise SecretError(f"cannot read the secret file {path}: {exc.strerror}") from exc
    if not value:
        raise SecretError(f"the secret file {path} is empty")
    return value


def url_with_password(url: str | URL, password_file: Path | str | None) -> URL:
    """``url`` with the password from ``password_file`` (unchanged without one).

    The result is a URL object: ``str()`` and ``repr()`` mask the password, so it never reaches a
    log or an error message by accident.

    Args:
        url: The database URL, without its password.
        password_file: The file holding the password; None leaves ``url`` as it is.
    """
    parsed = make_url(url)
    if password_file is None:
        return parsed
    return parsed.set(password=read_secret(password_file))
