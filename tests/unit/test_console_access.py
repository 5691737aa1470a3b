"""Access to the console through its HTTP surface (FastAPI's TestClient; the databases it reads
are absent, so a signed-in page answers 503 and a page of nobody a redirect to the sign-in):
a user removed from the users file, or given a new password, loses their session at once, with
no restart; a logout ends the session, not only its cookie; failed sign-ins are logged and
limited per name."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine

from outboxkit.console import auth
from outboxkit.console.actions import Operator
from outboxkit.console.app import ConsoleConfig, create_console
from outboxkit.console.overview import OverviewReader, Watched
from outboxkit.console.site import COOKIE

PASSWORDS = {"olive": "olive-pass", "victor": "victor-pass"}
LINES = {
    n: auth.user_line(n, r, PASSWORDS[n]) for n, r in (("olive", "operator"), ("victor", "viewer"))
}


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users"
    path.write_text("\n".join(LINES.values()) + "\n")
    return path


@pytest.fixture
def app(users_file: Path) -> Iterator[object]:
    dead = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    watched = Watched("payments", "c", ("t",), dead, {"bootstrap.servers": "127.0.0.1:1"})
    reader = OverviewReader([watched], {}, None)
    config = ConsoleConfig(auth.read_users(users_file), users_file=users_file)
    yield create_console(config, reader, Operator({}, {}))
    reader.close()
    dead.dispose()


def client_of(app: object) -> TestClient:
    return TestClient(app, base_url="http://console.test")  # type: ignore[arg-type]


def sign_in(client: TestClient, name: str, password: str | None = None) -> int:
    answer = client.post(
        "/login",
        data={"name": name, "password": password or PASSWORDS[name]},
        follow_redirects=False,
    )
    return answer.status_code


def signed_in(client: TestClient) -> bool:
    """True when a page answers as to a signed-in user (503: its database is absent), False
    when it sends to the sign-in form."""
    answer = client.get("/failures", follow_redirects=False)
    assert answer.status_code in (303, 503), answer.status_code
    return answer.status_code == 503


def test_a_user_removed_from_the_file_loses_their_session_at_once(
    app: object, users_file: Path
) -> None:
    with client_of(app) as victor, client_of(app) as olive:
        assert sign_in(victor, "victor") == 303 and sign_in(olive, "olive") == 303
        assert signed_in(victor) and signed_in(olive)
        users_file.write_text(LINES["olive"] + "\n")  # victor removed; no restart
        assert not signed_in(victor) and signed_in(olive)
        assert sign_in(victor, "victor") == 401  # and cannot sign in again


def test_a_new_password_ends_the_sessions_of_the_old_one(app: object, users_file: Path) -> None:
    with client_of(app) as olive:
        assert sign_in(olive, "olive") == 303 and signed_in(olive)
        users_file.write_text(auth.user_line("olive", "operator", "another") + "\n")
        assert not signed_in(olive)
        assert sign_in(olive, "olive", "another") == 303 and signed_in(olive)


def test_a_logout_ends_the_session_not_only_its_cookie(app: object) -> None:
    with client_of(app) as olive, client_of(app) as copy:
        assert sign_in(olive, "olive") == 303
        copy.cookies.set(COOKIE, olive.cookies[COOKIE])  # a copy of the cookie
        assert signed_in(copy)
        out = olive.post("/logout", follow_redirects=False)  # without the page's token too
        assert out.status_code == 303 and COOKIE not in olive.cookies
        assert not signed_in(copy)
        assert sign_in(olive, "olive") == 303 and signed_in(olive)  # a new session holds


def test_failed_sign_ins_are_logged_and_limited_per_name(
    app: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="outboxkit.console")
    with client_of(app) as client:
        for _ in range(5):
            assert sign_in(client, "olive", "guess") == 401
        limited = client.post(
            "/login", data={"name": "olive", "password": PASSWORDS["olive"]}, follow_redirects=False
        )  # even the right password is not checked now
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
        assert "Too many failed sign-ins" in limited.text
        assert sign_in(client, "victor") == 303  # another name still signs in
    said = [r.getMessage() for r in caplog.records]
    assert sum("sign-in of 'olive' from testclient failed" in s for s in said) == 5, said
    assert any("sign-in of 'olive' from testclient refused" in s for s in said), said
    assert any("victor signed in from testclient" in s for s in said), said
    assert not any(PASSWORDS["olive"] in s or "guess" in s for s in said)


def test_the_limit_lifts_once_the_failures_leave_the_window() -> None:
    limit = auth.SignInLimit(per_name=2, per_address=3, window=60.0)
    assert limit.wait("a", "h", now=0.0) == 0
    limit.failed("a", "h", now=0.0)
    limit.failed("a", "h", now=10.0)
    assert limit.wait("a", "h", now=11.0) == 49.0  # until the first leaves the window
    assert limit.wait("a", "h", now=60.5) == 0
    assert limit.wait("b", "h", now=11.0) == 0
    limit.failed("b", "h", now=12.0)  # the address's third failure
    assert limit.wait("c", "h", now=13.0) == 47.0
    limit.succeeded("a")
    assert limit.wait("a", "other", now=13.0) == 0
    small = auth.SignInLimit(keys=4)
    for n in range(10):
        small.failed(f"name{n}", f"host{n}", now=float(n))
    assert len(small._failures) <= 4
