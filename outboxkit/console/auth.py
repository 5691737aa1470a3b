"""Who may look and who may act: a configured user list with hashed passwords (scrypt), two
roles (``viewer`` reads, ``operator`` also acts), a signed session cookie and a CSRF token per
session. A session holds only while its user is in the users file as it is now, with the
password it signed in with (the role is the file's), and until it is logged out. No web
framework imported here."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Container, Mapping
from dataclasses import dataclass
from pathlib import Path

ROLES = ("viewer", "operator")
# scrypt's cost: 16 MiB and ~50 ms a check on a server core (the login form's only cost).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
SESSION_SECONDS = 8 * 3600

log = logging.getLogger(__name__)


class UsersFileError(ValueError):
    """The console's user list cannot be read: what is wrong, on which line, and the fix."""


@dataclass(frozen=True)
class User:
    """A signed-in person: their name, their role, their session's CSRF token (which names the
    session too) and when the session ends (epoch seconds)."""

    name: str
    role: str
    csrf: str
    ends: float = 0.0

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


def session_cookie(
    secret: bytes, name: str, role: str, stored: str, *, now: float | None = None
) -> str:
    """A signed session for ``name`` (whose password hash is ``stored``): who, which role, a
    fresh CSRF token, when it ends, and a fingerprint of the hash (a new password ends it)."""
    body = {
        "u": name,
        "r": role,
        "c": secrets.token_urlsafe(24),
        "e": int((now or time.time()) + SESSION_SECONDS),
        "h": _fingerprint(secret, stored),
    }
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    return f"{payload}.{_sign(secret, payload)}"


def read_session(
    secret: bytes,
    cookie: str | None,
    users: Mapping[str, tuple[str, str]],
    *,
    revoked: Container[str] = (),
    now: float | None = None,
) -> User | None:
    """The user a session cookie names, when its signature holds, it has not ended and was not
    logged out (``revoked``: the CSRF tokens of ended sessions), and its user is in ``users``
    with the password it signed in with. The role is ``users``' (a change holds at once)."""
    if not cookie or "." not in cookie:
        return None
    payload, signature = cookie.rsplit(".", 1)
    # bytes: compare_digest refuses text with non-ASCII characters (a tampered cookie)
    if not hmac.compare_digest(signature.encode(), _sign(secret, payload).encode()):
        return None
    try:
        body = json.loads(_unb64(payload))
        name, token, ends = str(body["u"]), str(body["c"]), float(body["e"])
    except (ValueError, KeyError, TypeError):
        return None
    if ends < (now or time.time()) or token in revoked or name not in users:
        return None
    role, stored = users[name]
    if not hmac.compare_digest(
        str(body.get("h", "")).encode(), _fingerprint(secret, stored).encode()
    ):
        return None
    return User(name, role, token, ends)


def csrf_ok(user: User, token: str | None) -> bool:
    """Whether a form's token is the session's own (a page of another site cannot know it)."""
    return bool(token) and hmac.compare_digest(user.csrf.encode(), (token or "").encode())


class Revoked:
    """Sessions logged out before their end (by CSRF token), each kept until it would have
    ended. In the console process's memory: a restart with the same secret forgets them (a
    new secret ends every session)."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, user: User, *, now: float | None = None) -> None:
        """End ``user``'s session."""
        now = now or time.time()
        with self._lock:
            self._until = {t: e for t, e in self._until.items() if e >= now}
            self._until[user.csrf] = user.ends

    def __contains__(self, token: object) -> bool:
        return token in self._until


class Users:
    """The users file, read again at each look (a few hundred bytes) and parsed when it
    changed: a user removed from it, or given a new password or role, holds no session past
    their next request, without a restart. A file that cannot be read lets nobody in (logged)
    until it is fixed."""

    def __init__(self, users: Mapping[str, tuple[str, str]], path: Path | None = None) -> None:
        self.path = path
        self._users = dict(users)
        self._seen = _contents(path) if path is not None else None
        self._lock = threading.Lock()

    def current(self) -> Mapping[str, tuple[str, str]]:
        """The users as the file says now."""
        if self.path is None:
            return self._users
        seen = _contents(self.path)
        with self._lock:
            if seen != self._seen:
                self._seen = seen
                try:
                    self._users = read_users(self.path)
                except UsersFileError as exc:
                    log.error("console: nobody can sign in: %s", exc)
                    self._users = {}
            return self._users


class SignInLimit:
    """Failed sign-ins counted per user name and per client address over ``window`` seconds:
    past ``per_name`` (or ``per_address``) failures, a sign-in of that name (or from that
    address) is refused, unchecked, until the oldest failure leaves the window. A success
    clears its name's failures. Bounded: at most ``keys`` names and addresses are remembered
    (the oldest forgotten first)."""

    def __init__(
        self,
        per_name: int = 5,
        per_address: int = 20,
        window: float = 300.0,
        keys: int = 10_000,
    ) -> None:
        self.limits = {"name": per_name, "address": per_address}
        self.window = window
        self.keys = keys
        self._failures: dict[tuple[str, str], list[float]] = {}
        self._lock = threading.Lock()

    def wait(self, name: str, address: str, *, now: float | None = None) -> float:
        """Seconds before ``name`` may try again from ``address`` (0: now)."""
        now = time.time() if now is None else now
        waits = [0.0]
        with self._lock:
            for kind, key in (("name", name), ("address", address)):
                recent = [t for t in self._failures.get((kind, key), []) if t > now - self.window]
                if len(recent) >= self.limits[kind]:
                    waits.append(recent[-self.limits[kind]] + self.window - now)
        return max(waits)

    def failed(self, name: str, address: str, *, now: float | None = None) -> int:
        """Count a failure; the name's failures in the window, this one included."""
        now = time.time() if now is None else now
        with self._lock:
            for key in (("name", name), ("address", address)):
                recent = [t for t in self._failures.pop(key, []) if t > now - self.window]
                self._failures[key] = [*recent, now][-max(self.limits.values()) :]
            while len(self._failures) > self.keys:  # the least recently failed first
                del self._failures[next(iter(self._failures))]
            return len(self._failures[("name", name)])

    def succeeded(self, name: str) -> None:
        """``name`` signed in: its failures are forgotten (its address's are not)."""
        with self._lock:
            self._failures.pop(("name", name), None)


def _contents(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _fingerprint(secret: bytes, stored: str) -> str:
    """A user's password hash as a session carries it: signed, shortened (it proves the hash
    is the one the session signed in with, and tells nothing of it)."""
    return _sign(secret, "password:" + stored)[:22]


def _sign(secret: bytes, payload: str) -> str:
    return _b64(hmac.new(secret, payload.encode(), hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_DECOY = hash_password("not a password", salt=b"0" * 16)
