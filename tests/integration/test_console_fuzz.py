"""The console under random requests (hypothesis): every page and every action, with path
parameters, query strings and form fields drawn from hostile text (controls, NUL, bidi
overrides, huge and negative numbers, not-a-number), signed in with a valid form token or not,
against the real Postgres holding parked records, Kafka away. Never a 500; an outage is a 503;
every answer carries the console's security headers."""

from __future__ import annotations

import os
import re
import uuid
from collections import Counter
from urllib.parse import quote

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from inbox import Inbox
from outboxkit.console import auth
from outboxkit.console.actions import Operator
from outboxkit.console.app import ConsoleConfig, create_console
from outboxkit.console.overview import OverviewReader, Watched
from outboxkit_workshop.devstack.processes import free_port
from tests.integration.test_console_reads import ERRORS, park

EXAMPLES = int(os.environ.get("OUTBOXKIT_FUZZ_EXAMPLES", "150"))
HOSTILE = st.one_of(
    st.text(max_size=24),
    st.text(alphabet="\x00\r\n\t\u202e\u200b\u2066<>\"'&%/\\;", max_size=12),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["", "nan", "inf", "-inf", "1e9", "-1", "0", "1", "t", "%00", "0x10"]),
)
PAGES = ("/", "/live/overview", "/failures", "/failures/group", "/events", "/actions", "/login")
PAGE_PARAMS = ("hours", "key", "cause", "kind", "consumer", "after", "id", "scan", "next", "q")
ACTIONS = (
    *(f"/act/{name}" for name in ("retry", "redrive-group", "skip", "edit", "rewind", "rebase")),
    "/logout",
)
FORM_FIELDS = (
    "consumer",
    "id",
    "ids",
    "cause",
    "topic",
    "partition",
    "offset",
    "payload",
    "reason",
    "back",
    "request",
    "reading",
    "source",
    "value",
    "confirm",
)


def request_strategy(consumer: str) -> st.SearchStrategy[tuple[str, str, dict[str, str]]]:
    who = st.one_of(st.just(consumer), HOSTILE)
    params = st.dictionaries(st.sampled_from(PAGE_PARAMS), HOSTILE, max_size=4)
    page = st.tuples(st.just("GET"), st.sampled_from(PAGES), params)
    record = st.builds(
        lambda c, i: f"/records/{quote(c, safe='')}/{quote(i, safe='')}", who, HOSTILE
    )
    partition = st.builds(
        lambda c, t, p: f"/partitions/{quote(c, safe='')}/{quote(t, safe='')}/{quote(p, safe='')}",
        who,
        st.one_of(st.just("t"), HOSTILE),
        HOSTILE,
    )
    paths = st.tuples(st.just("GET"), st.one_of(record, partition), params)
    form = st.dictionaries(st.sampled_from(FORM_FIELDS), st.one_of(who, HOSTILE), max_size=6)
    action = st.tuples(st.just("POST"), st.sampled_from(ACTIONS), form)
    return st.one_of(page, paths, action)


def test_no_request_makes_the_console_fail(engine: Engine) -> None:
    consumer = f"fuzz-{uuid.uuid4().hex[:6]}"
    park(engine, consumer, ERRORS)
    kafka = {"bootstrap.servers": f"127.0.0.1:{free_port()}"}  # nothing listens: Kafka away
    watched = Watched("payments", consumer, ("t",), engine, kafka)
    reader = OverviewReader([watched], {"payments": engine}, None)
    inbox = Inbox(engine, consumer, {})
    config = ConsoleConfig({"olive": ("operator", auth.hash_password("pw"))})
    app = create_console(config, reader, Operator({consumer: inbox}, {consumer: kafka}))
    origin = {"origin": "http://console.test"}
    with TestClient(app, base_url="http://console.test") as client:

        def sign_in() -> str:
            """Sign in; the session's form token."""
            assert client.post("/login", data={"name": "olive", "password": "pw"}).is_success
            page = client.get("/failures").text
            found = re.search(r'name="csrf" value="([^"]+)"', page)
            assert found is not None, page[:2000]
            return found.group(1)

        session = {"csrf": sign_in()}
        seen: Counter[tuple[str, int]] = Counter()

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(request_strategy(consumer), st.booleans())
        def answers(drawn: tuple[str, str, dict[str, str]], token: bool) -> None:
            method, path, values = drawn
            if method == "GET":
                answer = client.get(path, params=values, follow_redirects=False)
            else:
                form = {**values, "csrf": session["csrf"]} if token else values
                answer = client.post(path, data=form, headers=origin, follow_redirects=False)
            seen[
                (method if method == "GET" or not token else "POST, no token", answer.status_code)
            ] += 1
            assert answer.status_code != 500, (method, path, values, answer.text[:2000])
            assert answer.status_code < 500 or answer.status_code == 503, (method, path, values)
            policy = answer.headers.get("content-security-policy", "")
            assert "frame-ancestors 'none'" in policy, (method, path, values, answer.status_code)
            assert answer.headers.get("x-content-type-options") == "nosniff", (method, path)
            if path == "/logout" and answer.status_code in (303, 307):  # signed out: sign in
                session["csrf"] = sign_in()

        answers()
    reader.close()
    print(sorted(seen.items()))
    # the requests reached the pages and, past the form token, the actions' own checks
    assert any(method == "GET" and status == 200 for method, status in seen)
    assert any(method == "POST" and status not in (403, 500) for method, status in seen)
