"""The console's sign-in and session rules (pure): scrypt hashes, the users file, signed session
cookies that cannot be forged, changed or kept past their end, CSRF tokens per session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outboxkit.console import auth

SECRET = b"k" * 32
# Hashes of a fixed salt (fast to make, enough for the session rules).
OLIVE = auth.hash_password("o-pass", salt=b"o" * 16)
VICTOR = auth.hash_password("v-pass", salt=b"v" * 16)
USERS = {"olive": ("operator", OLIVE), "victor": ("viewer", VICTOR)}


def session(name: str, now: float | None = None) -> str:
    role, stored = USERS[name]
    return auth.session_cookie(SECRET, name, role, stored, now=now)


def test_a_password_checks_against_its_hash_and_no_other() -> None:
    stored = auth.hash_password("correct horse")
    assert stored.startswith("scrypt$16384$8$1$")
    assert auth.check_password("correct horse", stored)
    assert not auth.check_password("correct horsf", stored)
    assert not auth.check_password("correct horse", "md5$whatever")
    assert not auth.check_password("correct horse", "scrypt$1$2")  # malformed: refused, no error
    assert auth.hash_password("same", salt=b"s" * 16) != auth.hash_password("same")


def test_authenticate_gives_the_role_of_a_known_user_only() -> None:
    users = {"olive": ("operator", auth.hash_password("o-pass"))}
    assert auth.authenticate(users, "olive", "o-pass") == ("olive", "operator")
    assert auth.authenticate(users, "olive", "wrong") is None
    assert auth.authenticate(users, "nobody", "o-pass") is None


def test_the_users_file_is_read_and_its_mistakes_named(tmp_path: Path) -> None:
    path = tmp_path / "users"
    path.write_text(
        "# the console's users\n"
        + auth.user_line("olive", "operator", "a")
        + "\n"
        + auth.user_line("victor", "viewer", "b")
        + "  # read only\n"
    )
    users = auth.read_users(path)
    assert {name: role for name, (role, _) in users.items()} == {
        "olive": "operator",
        "victor": "viewer",
    }
    path.write_text("olive admin scrypt$x\n")
    with pytest.raises(auth.UsersFileError, match=r"users:1: expected NAME ROLE HASH"):
        auth.read_users(path)
    path.write_text("# nobody\n")
    with pytest.raises(auth.UsersFileError, match="names no user"):
        auth.read_users(path)
    with pytest.raises(auth.UsersFileError, match="cannot read"):
        auth.read_users(tmp_path / "absent")
    with pytest.raises(ValueError, match="not a role"):
        auth.user_line("olive", "admin", "x")
    with pytest.raises(ValueError, match="not a user name"):
        auth.user_line("two words", "viewer", "x")


def test_a_session_cookie_names_its_user_until_it_ends() -> None:
    cookie = session("olive", now=1000.0)
    user = auth.read_session(SECRET, cookie, USERS, now=1001.0)
    assert user is not None and (user.name, user.role, user.may_act) == ("olive", "operator", True)
    assert user.ends == 1000.0 + auth.SESSION_SECONDS
    assert auth.read_session(SECRET, cookie, USERS, now=1000.0 + auth.SESSION_SECONDS + 1) is None
    assert auth.read_session(b"another key" * 3, cookie, USERS, now=1001.0) is None
    assert auth.read_session(SECRET, None, USERS) is None
    assert auth.read_session(SECRET, "no-dot", USERS) is None


def test_a_session_holds_only_for_the_users_file_as_it_is_now() -> None:
    cookie = session("olive")
    assert auth.read_session(SECRET, cookie, USERS) is not None
    # removed from the file: the session ends
    assert auth.read_session(SECRET, cookie, {"victor": USERS["victor"]}) is None
    # a new password (a new hash): the sessions of the old one end
    renewed = {**USERS, "olive": ("operator", auth.hash_password("new", salt=b"n" * 16))}
    assert auth.read_session(SECRET, cookie, renewed) is None
    # the role is the file's now: an operator made a viewer acts no more
    demoted = {**USERS, "olive": ("viewer", OLIVE)}
    user = auth.read_session(SECRET, cookie, demoted)
    assert user is not None and user.role == "viewer" and not user.may_act


def test_a_logged_out_session_holds_no_more_and_is_forgotten_when_it_would_have_ended() -> None:
    revoked = auth.Revoked()
    first, second = session("olive", now=1000.0), session("olive", now=1000.0)
    user = auth.read_session(SECRET, first, USERS, revoked=revoked, now=1001.0)
    assert user is not None
    revoked.add(user, now=1001.0)
    assert auth.read_session(SECRET, first, USERS, revoked=revoked, now=1002.0) is None
    assert auth.read_session(SECRET, second, USERS, revoked=revoked, now=1002.0) is not None
    later = auth.read_session(SECRET, session("victor"), USERS)
    assert later is not None
    revoked.add(later, now=1000.0 + auth.SESSION_SECONDS + 1)  # the first one's end has passed
    assert user.csrf not in revoked and later.csrf in revoked


def test_the_users_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "users"
    path.write_text(f"olive operator {OLIVE}\nvictor viewer {VICTOR}\n")
    users = auth.Users(auth.read_users(path), path)
    assert set(users.current()) == {"olive", "victor"}
    path.write_text(f"victor viewer {VICTOR}\n")
    assert set(users.current()) == {"victor"}
    path.write_text("victor admin broken\n")  # unreadable: nobody, until it is fixed
    assert users.current() == {}
    path.unlink()
    assert users.current() == {}
    path.write_text(f"olive viewer {OLIVE}\n")
    assert users.current() == {"olive": ("viewer", OLIVE)}


@settings(max_examples=200, deadline=None)
@given(position=st.integers(min_value=0, max_value=400), char=st.characters(codec="ascii"))
def test_a_changed_cookie_is_refused(position: int, char: str) -> None:
    cookie = session("victor", now=1000.0)
    index = position % len(cookie)
    changed = cookie[:index] + char + cookie[index + 1 :]
    user = auth.read_session(SECRET, changed, USERS, now=1001.0)
    assert (
        changed == cookie
        or user is None
        or user == auth.read_session(SECRET, cookie, USERS, now=1001.0)
    )


def test_csrf_tokens_belong_to_their_session() -> None:
    first = auth.read_session(SECRET, session("olive"), USERS)
    second = auth.read_session(SECRET, session("olive"), USERS)
    assert first is not None and second is not None
    assert auth.csrf_ok(first, first.csrf)
    assert not auth.csrf_ok(first, second.csrf)
    assert not auth.csrf_ok(first, "")
    assert not auth.csrf_ok(first, None)
    viewer = auth.read_session(SECRET, session("victor"), USERS)
    assert viewer is not None and not viewer.may_act


def test_console_user_writes_a_hashed_line_and_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "users"

    def run(name: str, role: str, password: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "outboxkit.cli", "console-user", name, "--role", role]
        return subprocess.run(
            [*command, "--file", str(path), "--password-stdin"],
            input=password + "\n",
            capture_output=True,
            text=True,
            check=False,
        )

    assert run("olive", "operator", "first").returncode == 0
    assert run("victor", "viewer", "second").returncode == 0
    assert run("olive", "viewer", "third").returncode == 0  # replaced, not added
    users = auth.read_users(path)
    assert {n: r for n, (r, _) in users.items()} == {"olive": "viewer", "victor": "viewer"}
    assert auth.authenticate(users, "olive", "third") == ("olive", "viewer")
    assert "third" not in path.read_text()  # only its hash
    assert path.stat().st_mode & 0o777 == 0o600
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "outboxkit.cli",
            "console-user",
            "ann",
            "--role",
            "viewer",
            "--file",
            "-",
            "--password-stdin",
        ],
        input="fourth\n",
        capture_output=True,
        text=True,
        check=True,
    )
    path.write_text(path.read_text() + printed.stdout)  # appended where the file lives
    assert auth.authenticate(auth.read_users(path), "ann", "fourth") == ("ann", "viewer")


def test_the_console_will_not_start_without_its_users(tmp_path: Path) -> None:
    job = tmp_path / "jobs.py"
    job.write_text(
        "from spark_consumers.job import Job\n"
        "JOB = Job(name='j', topics=('t',), consumer='c', handlers={}, "
        "database_url='postgresql+psycopg://u@127.0.0.1:1/d', bootstrap_servers='127.0.0.1:1')\n"
    )
    env = {"PATH": "/usr/bin:/bin", "OUTBOXKIT_STACK_DIR": str(tmp_path / "stack")}
    done = subprocess.run(
        [sys.executable, "-m", "outboxkit.cli", "console", "jobs:JOB"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "OUTBOXKIT_CONSOLE_USERS_FILE" in done.stderr
    assert "Traceback" not in done.stderr
