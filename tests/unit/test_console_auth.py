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
    cookie = auth.session_cookie(SECRET, "olive", "operator", now=1000.0)
    user = auth.read_session(SECRET, cookie, now=1001.0)
    assert user is not None and (user.name, user.role, user.may_act) == ("olive", "operator", True)
    assert auth.read_session(SECRET, cookie, now=1000.0 + auth.SESSION_SECONDS + 1) is None
    assert auth.read_session(b"another key" * 3, cookie, now=1001.0) is None
    assert auth.read_session(SECRET, None) is None
    assert auth.read_session(SECRET, "no-dot") is None


@settings(max_examples=200, deadline=None)
@given(position=st.integers(min_value=0, max_value=400), char=st.characters(codec="ascii"))
def test_a_changed_cookie_is_refused(position: int, char: str) -> None:
    cookie = auth.session_cookie(SECRET, "victor", "viewer", now=1000.0)
    index = position % len(cookie)
    changed = cookie[:index] + char + cookie[index + 1 :]
    user = auth.read_session(SECRET, changed, now=1001.0)
    assert (
        changed == cookie or user is None or user == auth.read_session(SECRET, cookie, now=1001.0)
    )


def test_csrf_tokens_belong_to_their_session() -> None:
    first = auth.read_session(SECRET, auth.session_cookie(SECRET, "olive", "operator"))
    second = auth.read_session(SECRET, auth.session_cookie(SECRET, "olive", "operator"))
    assert first is not None and second is not None
    assert auth.csrf_ok(first, first.csrf)
    assert not auth.csrf_ok(first, second.csrf)
    assert not auth.csrf_ok(first, "")
    assert not auth.csrf_ok(first, None)
    viewer = auth.read_session(SECRET, auth.session_cookie(SECRET, "victor", "viewer"))
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
