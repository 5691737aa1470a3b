"""The console's reads and answers on the real Postgres: parked records group by cause (Postgres
computes it on insert and on update), filters narrow the groups, an event is found wherever the
inbox holds it, and an unreachable database is a 503 page that says so, never a 500."""

from __future__ import annotations

import uuid
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, insert, select, update
from sqlalchemy.engine import Engine

from inbox.tables import parked
from outboxkit.console import auth, reads
from outboxkit.console.actions import Operator
from outboxkit.console.app import ConsoleConfig, create_console
from outboxkit.console.overview import OverviewReader, Watched

ERRORS = [
    "handler failed: ValueError: cannot charge order 17 amount -5",
    "handler failed: ValueError: cannot charge order 2301 amount -12.5",
    "handler failed: KeyError: 'customer'",
    "handler failed: KeyError: 'address'",
    "handler failed: LookupError: no order 0b2f3c1e-9a8d-4c7b-8e6f-5a4b3c2d1e0f\nTraceback...",
    "handler failed: LookupError: no order 7c1e2d3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f",
    "held behind a parked record of key order-1",
    "held behind a parked record of key 'quoted' key 9",
]


def park(engine: Engine, consumer: str, errors: list[str], topic: str = "t") -> list[int]:
    rows = [
        {
            "consumer": consumer,
            "topic": topic,
            "partition": 0,
            "offset": offset,
            "raw_key": f"k{offset}".encode(),
            "payload": b"{}",
            "key": f"k{offset}",
            "event_id": str(uuid.uuid4()),
            "event_type": "Charge",
            "error": error,
            "attempts": 1,
        }
        for offset, error in enumerate(errors)
    ]
    with engine.begin() as conn:
        return list(conn.execute(insert(parked).returning(parked.c.id), rows).scalars())


def test_parked_records_group_by_cause_whatever_their_numbers_ids_and_quotes(
    engine: Engine,
) -> None:
    consumer = f"groups-{uuid.uuid4().hex[:6]}"
    ids = park(engine, consumer, ERRORS)
    with engine.connect() as conn:
        groups = reads.failure_groups(conn, consumer, reads.Filters())
    assert {g.cause: g.count for g in groups} == {
        "handler failed: ValueError: cannot charge order <n> amount -<n>": 2,
        "handler failed: KeyError: <text>": 2,
        "handler failed: LookupError: no order <id>": 2,
        "held behind a parked record of key <key>": 2,
    }
    assert [g.count for g in groups] == [2, 2, 2, 2]
    # The cause follows the error: a record that fails otherwise on a retry moves group.
    with engine.begin() as conn:
        conn.execute(
            update(parked)
            .where(parked.c.id == ids[0])
            .values(error="handler failed: TimeoutError: 30 s")
        )
    with engine.connect() as conn:
        groups = reads.failure_groups(conn, consumer, reads.Filters())
        narrowed = reads.failure_groups(conn, consumer, reads.Filters(key="k1"))
        records = reads.group_records(
            conn, consumer, "handler failed: KeyError: <text>", reads.Filters()
        )
    assert {g.cause: g.count for g in groups}["handler failed: TimeoutError: <n> s"] == 1
    assert [(g.cause, g.count) for g in narrowed] == [
        ("handler failed: ValueError: cannot charge order <n> amount -<n>", 1)
    ]
    assert [r["key"] for r in records] == ["k2", "k3"]


def test_an_event_is_found_where_the_inbox_keeps_it(engine: Engine) -> None:
    consumer = f"where-{uuid.uuid4().hex[:6]}"
    park(engine, consumer, ["handler failed: ValueError: x"])
    with engine.connect() as conn:
        event_id = conn.execute(
            select(parked.c.event_id).where(parked.c.consumer == consumer)
        ).scalar_one()
        found = reads.inbox_side(conn, consumer, event_id)
        nothing = reads.inbox_side(conn, consumer, str(uuid.uuid4()))
    assert [(p["topic"], p["offset"]) for p in found["parked"]] == [("t", 0)]
    assert found["applied"] == found["in_window"] == found["skipped"] == []
    assert all(rows == [] for rows in nothing.values())


def test_an_unreachable_database_is_a_503_that_says_so(tmp_path: Path) -> None:
    dead = create_engine(
        "postgresql+psycopg://nobody@127.0.0.1:1/none", connect_args={"connect_timeout": 2}
    )
    watched = Watched("payments", "c", ("t",), dead, {"bootstrap.servers": "127.0.0.1:1"})
    reader = OverviewReader([watched], {"none on 127.0.0.1:1": dead}, None)
    config = ConsoleConfig({"olive": ("operator", auth.hash_password("pw"))})
    app = create_console(config, reader, Operator({}, {}))
    with TestClient(app, base_url="http://console.test") as client:
        signed = client.post(
            "/login", data={"name": "olive", "password": "pw"}, follow_redirects=False
        )
        assert signed.status_code == 303
        overview = client.get("/")  # each part says what did not answer
        assert overview.status_code == 200
        assert "OperationalError" in overview.text and "nobody" not in overview.text
        failures = client.get("/failures")
        assert failures.status_code == 503
        assert "the database did not answer" in failures.text
        assert client.get("/records/elsewhere/1").status_code == 404
        assert client.get("/login?next=//evil.example").status_code == 200
        back = client.post(
            "/login",
            data={"name": "olive", "password": "pw", "next": "//evil.example"},
            follow_redirects=False,
        )
        assert back.headers["location"] == "/"
        assert "frame-ancestors 'none'" in overview.headers["content-security-policy"]
    reader.close()
    dead.dispose()


def test_bad_input_is_a_4xx_page_with_the_security_headers(engine: Engine) -> None:
    """Ages past what a date can hold, a NUL in a filter, ids past a bigint, a path parameter
    that is not a number, a tampered session cookie with non-ASCII characters: a page that
    says what was wrong (or the sign-in page), never a bare 500, always with the headers."""
    from outboxkit.console.site import COOKIE

    consumer = f"bad-input-{uuid.uuid4().hex[:6]}"
    watched = Watched("payments", consumer, ("t",), engine, {"bootstrap.servers": "127.0.0.1:1"})
    reader = OverviewReader([watched], {"payments": engine}, None)
    config = ConsoleConfig({"olive": ("operator", auth.hash_password("pw"))})
    app = create_console(config, reader, Operator({}, {}))
    with TestClient(app, base_url="http://console.test") as client:
        cookie = f"{COOKIE}=e30.sïgnature".encode("latin-1")  # as a browser may send it
        tampered = client.get("/failures", headers={"cookie": cookie}, follow_redirects=False)
        assert tampered.status_code in (303, 307) and "login" in tampered.headers["location"]
        signed = client.post(
            "/login", data={"name": "olive", "password": "pw"}, follow_redirects=False
        )
        assert signed.status_code == 303
        pages = {
            "/failures?hours=1e9": (200, "is not a number of hours"),
            "/failures?hours=inf": (200, "is not a number of hours"),
            "/failures?hours=-1e9": (200, "is not a number of hours"),
            "/failures?hours=nan": (200, "is not a number of hours"),
            "/failures?key=a%00b": (200, "NUL"),
            f"/records/{consumer}/99999999999999999999": (400, "out of range"),
            f"/partitions/{consumer}/t/zero": (400, "partition"),
        }
        for path, (status, said) in pages.items():
            answer = client.get(path)
            assert answer.status_code == status, (path, answer.status_code, answer.text[:300])
            assert said in answer.text, (path, answer.text[:2000])
            assert "frame-ancestors 'none'" in answer.headers["content-security-policy"], path
    reader.close()


def test_a_stopped_partitions_page_says_kafka_did_not_answer(engine: Engine) -> None:
    """The runbook page of a stopped partition while Kafka is down: the page, with the stop's
    reason and a line that Kafka did not answer (a rebase needs the topic's identity), not a
    500; a rebase posted meanwhile is refused with the same words."""
    from types import SimpleNamespace

    from inbox.tables import watermarks

    consumer = f"kafka-down-{uuid.uuid4().hex[:6]}"
    dead = {"bootstrap.servers": "127.0.0.1:1"}
    reason = "the topic's id changed (re-created): offsets moved"
    with engine.begin() as conn:
        conn.execute(
            insert(watermarks).values(
                consumer=consumer, topic="t", partition=0, offset=5, stopped=reason
            )
        )
    watched = Watched("payments", consumer, ("t",), engine, dead)
    reader = OverviewReader([watched], {"payments": engine}, None)
    config = ConsoleConfig({"olive": ("operator", auth.hash_password("pw"))})
    operator = Operator({consumer: SimpleNamespace(engine=engine)}, {consumer: dead})
    app = create_console(config, reader, operator)
    with TestClient(app, base_url="http://console.test") as client:
        client.post("/login", data={"name": "olive", "password": "pw"})
        page = client.get(f"/partitions/{consumer}/t/0")
        assert page.status_code == 200, page.text[:500]
        assert "offsets moved" in page.text and "did not answer" in page.text, page.text
        # resumed meanwhile (by the CLI, say): the page says so at once, whatever the
        # overview's last read still shows
        with engine.begin() as conn:
            conn.execute(
                update(watermarks)
                .where(watermarks.c.consumer == consumer)
                .values(stopped=None, offset=9)
            )
        assert reader.read().consumers[0].partitions[0].stopped == reason  # the overview's
        page = client.get(f"/partitions/{consumer}/t/0")
        assert page.status_code == 200 and "offsets moved" not in page.text, page.text
    reader.close()


def test_during_a_kafka_outage_the_pages_say_so_and_ask_kafka_once(engine: Engine) -> None:
    """Kafka down (nothing listens at its address), Connect down too: the overview says both
    did not answer (lag unknown, not 0); reading the topics for an event says Kafka did not
    answer, and the next look answers from that failure without asking Kafka again."""
    from outboxkit_workshop.devstack.processes import free_port

    dead = f"127.0.0.1:{free_port()}"
    consumer = f"kafka-out-{uuid.uuid4().hex[:6]}"
    from inbox.tables import watermarks

    with engine.begin() as conn:
        conn.execute(insert(watermarks).values(consumer=consumer, topic="t", partition=0, offset=5))
    kafka = {"bootstrap.servers": dead}
    watched = Watched("payments", consumer, ("t",), engine, kafka)

    def connect() -> object:
        raise ConnectionError("Connect refused the connection")

    reader = OverviewReader([watched], {"payments": engine}, connect, fresh=0.0)
    config = ConsoleConfig({"olive": ("operator", auth.hash_password("pw"))})
    app = create_console(config, reader, Operator({consumer: None}, {consumer: kafka}))
    with TestClient(app, base_url="http://console.test") as client:
        client.post("/login", data={"name": "olive", "password": "pw"})
        overview = client.get("/")
        assert overview.status_code == 200
        assert f"Kafka at {dead} did not answer" in overview.text, overview.text
        assert "Kafka Connect did not answer" in overview.text
        again = client.get("/")  # Connect is not asked again meanwhile: the same words
        assert "Kafka Connect did not answer" in again.text and "asks again within" in again.text
        assert "lag (records): none known" in again.text  # no lag known: no point drawn
        event = str(uuid.uuid4())
        first = client.get(f"/events?id={event}&scan=1")
        assert first.status_code == 200
        assert f"Kafka at {dead} did not answer (" in first.text, first.text
        second = client.get(f"/events?id={event}&scan=1")
        assert second.status_code == 200
        assert "s ago" in second.text and "the console asks again in" in second.text
    reader.close()


def test_hostile_record_text_is_shown_as_written_never_reordered(engine: Engine) -> None:
    """A key with a right-to-left override, a cause with a zero-width space and a carriage
    return, a traceparent whose id is a path: the record's page writes the invisible characters
    out (the key cannot pass for another), links no trace, and the edit form keeps the payload
    byte for byte."""
    consumer = f"hostile-{uuid.uuid4().hex[:6]}"
    spoof = "order-\u202egpj.exe"
    with engine.begin() as conn:
        record_id = conn.execute(
            insert(parked)
            .values(
                consumer=consumer, topic="t", partition=0, offset=0,
                raw_key=spoof.encode(), key=spoof, payload="\u202e".encode(),
                event_id=str(uuid.uuid4()), event_type="Charge", attempts=1,
                error="handler failed: ValueError: bad\u200b amount\r",
                header_names=[b"traceparent"],
                header_values=[b"00-../../../admin?x=-00f067aa0ba902b7-01"],
            )
            .returning(parked.c.id)
        ).scalar_one()  # fmt: skip
    watched = Watched("payments", consumer, ("t",), engine, {"bootstrap.servers": "127.0.0.1:1"})
    reader = OverviewReader([watched], {"payments": engine}, None)
    config = ConsoleConfig(
        {"olive": ("operator", auth.hash_password("pw"))},
        trace_url="http://traces.example/trace/{trace_id}",
    )
    app = create_console(config, reader, Operator({consumer: None}, {}))
    with TestClient(app, base_url="http://console.test") as client:
        client.post("/login", data={"name": "olive", "password": "pw"})
        page = client.get(f"/records/{consumer}/{record_id}")
        assert page.status_code == 200, page.text[:500]
        assert "order-\\u202egpj.exe" in page.text and "bad\\u200b amount\\u000d" in page.text
        assert "traces.example" not in page.text
        edit = page.text.split('name="payload"', 1)[1].split("</textarea>", 1)[0]
        assert "\u202e" in edit  # the edit form: the payload as it is
        shown = page.text.replace(edit, "")
        assert "\u202e" not in shown and "\u200b" not in shown and "\r" not in shown
    reader.close()
