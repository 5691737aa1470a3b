"""The stack's passwords: one file per role (``<role>.password``, mode 0600) in the secrets
directory, and the libpq password file the stack's own connections read."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from outboxkit.kernel.secrets import read_secret


class SecretStore:
    """Role passwords as files, generated on first use (mounted secrets are only read)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def file(self, role: str) -> Path:
        """Where ``role``'s password is (the file a ``*_PASSWORD_FILE`` setting names)."""
        return self.dir / f"{role}.password"

    def password(self, role: str) -> str:
        """``role``'s password; generated and stored when missing."""
        path = self.file(role)
        if not path.exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            self.dir.chmod(0o700)
            _write_private(path, secrets.token_urlsafe(24))
        return read_secret(path)

    def roles(self) -> list[str]:
        """The roles that have a password file."""
        return sorted(p.name.removesuffix(".password") for p in self.dir.glob("*.password"))


def pgpass_line(role: str, password: str) -> str:
    """One line of a libpq password file, for ``role`` on any host, port and database."""
    escaped = password.replace("\\", "\\\\").replace(":", "\\:")
    return f"*:*:*:{role}:{escaped}\n"


def write_pgpass(path: Path, entries: Iterable[tuple[str, str]]) -> Path:
    """Write the libpq password file (0600: libpq ignores a file others can read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, "".join(pgpass_line(role, pw) for role, pw in entries))
    return path


def _write_private(path: Path, content: str) -> None:
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(content)
    partial.rename(path)
