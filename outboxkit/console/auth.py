"""Who may look and who may act: a configured user list with hashed passwords (scrypt), two
roles (``viewer`` reads, ``operator`` also acts), a signed session cookie and a CSRF token per
session. Pure functions and one frozen dataclass; no web framework imported here."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROLES = ("viewer", "operator")
# scrypt's cost: 16 MiB and ~50 ms a check on a server core (the login form's only cost).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
SESSION_SECONDS = 8 * 3600


class UsersFileError(ValueError):
    """The console's user list cannot be read: what is wrong, on which line, and the fix."""


@dataclass(frozen=True)
class User:
    """A signed-in person: their name, their role and their session's CSRF token."""

    name: str
    role: str
    csrf: str

    @property
    def may_act(self) -> bool:
        """Operators act (redrive, skip, edit, rewind, rebase); viewers only read."""
        return self.role == "operator"


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """A password's scrypt hash, as a users file keeps it: ``scrypt$n$r$p$salt$hash``."""
    if not password:
        raise ValueError("an empty password")
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    return "$".join(
        ["scrypt", str(SCRYPT_N), str(SCRYPT_R), str(SCRYPT_P), _b64(salt), _b64(digest)]
    )


def check_password(password: str, stored: str) -> bool:
    """Whether ``password`` is the one ``stored`` (a `hash_password` value) was made from."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        found = hashlib.scrypt(
            password.encode(), salt=_unb64(salt), n=int(n), r=int(r), p=int(p), dklen=32
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(found, _unb64(digest))


def read_users(path: Path) -> dict[str, tuple[str, str]]:
    """A users file: one ``NAME ROLE HASH`` a line (`outboxkit console-user` writes them; ``#``
    starts a comment). Returns name -> (role, hash)."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise UsersFileError(f"cannot read the console's users file {path}: {exc}") from exc
    users: dict[str, tuple[str, str]] = {}
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3 or parts[1] not in ROLES or not parts[2].startswith("scrypt$"):
            raise UsersFileError(
                f"{path}:{number}: expected NAME ROLE HASH with ROLE one of {', '.join(ROLES)} "
                "(write lines with `outboxkit console-user NAME --role ROLE --file FILE`)"
            )
        users[parts[0]] = (parts[1], parts[2])
    if not users:
        raise UsersFileError(
            f"{path} names no user: add one with "
            "`outboxkit console-user NAME --role operator --file FILE`"
        )
    return users


def user_line(name: str, role: str, password: str) -> str:
    """One users-file line for ``name`` (a word) in ``role``."""
    if not name or any(c.isspace() or c == "#" for c in name):
        raise ValueError(f"{name!r} is not a user name: one word, without '#'")
    if role not in ROLES:
        raise ValueError(f"{role!r} is not a role: one of {', '.join(ROLES)}")
    return f"{name} {role} {hash_password(password)}"


def authenticate(
    users: Mapping[str, tuple[str, str]], name: str, password: str
) -> tuple[str, str] | None:
    """(name, role) when ``password`` is ``name``'s; None otherwise. An unknown name costs a
    hash too, so the time taken does not tell which names exist."""
    role, stored = users.get(name, ("", _DECOY))
    ok = check_password(password, stored)
    return (name, role) if ok and role else None


def session_cookie(secret: bytes, name: str, role: str, *, now: float | None = None) -> str:
    """A signed session for ``name``: who, which role, a fresh CSRF token and when it ends."""
    body = {
        "u": name,
        "r": role,
        "c": secrets.token_urlsafe(24),
        "e": int((now or time.time()) + SESSION_SECONDS),
    }
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    return f"{payload}.{_sign(secret, payload)}"


def read_session(secret: bytes, cookie: str | None, *, now: float | None = None) -> User | None:
    """The user a session cookie names, when its signature holds and it has not ended."""
    if not cookie or "." not in cookie:
        return None
    payload, signature = cookie.rsplit(".", 1)
    # bytes: compare_digest refuses text with non-ASCII characters (a tampered cookie)
    if not hmac.compare_digest(signature.encode(), _sign(secret, payload).encode()):
        return None
    try:
        body = json.loads(_unb64(payload))
    except ValueError:
        return None
    if body.get("e", 0) < (now or time.time()) or body.get("r") not in ROLES:
        return None
    return User(str(body["u"]), str(body["r"]), str(body["c"]))


def csrf_ok(user: User, token: str | None) -> bool:
    """Whether a form's token is the session's own (a page of another site cannot know it)."""
    return bool(token) and hmac.compare_digest(user.csrf.encode(), (token or "").encode())


def _sign(secret: bytes, payload: str) -> str:
    return _b64(hmac.new(secret, payload.encode(), hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_DECOY = hash_password("not a password", salt=b"0" * 16)
