"""The operator console in a real browser (the machine's Chromium through Playwright) on the
real stack (Postgres, Kafka, Connect): poison records are parked and shown in their failure
group, the handler is fixed, an operator redrives the group and every effect is applied once,
the action log shows it; a viewer cannot act; a stopped partition shows its reason; an edited
payload is applied and its original kept; every page passes axe-core's check. The docs'
screenshots (docs/assets/console/) come from this run."""

from __future__ import annotations

import json
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from playwright.sync_api import Page, expect
from sqlalchemy import Column, MetaData, String, Table, create_engine, func, select, update
from sqlalchemy.engine import Engine, make_url

from cdc.endpoints import Endpoints
from inbox import stops
from inbox.tables import operator_actions, parked, watermarks
from outboxkit.console import build_console
from outboxkit.console.auth import user_line
from outboxkit.kernel.kafka.security import PLAINTEXT
from outboxkit.settings import Settings
from outboxkit_workshop.devstack.stack import Stack
from spark_consumers.job import Job
from tests.browser.axe import axe_violations
from tests.browser.shots import shot
from tests.kafka import read_records
from tests.serving import serving

effects_md = MetaData()
effects = Table(
    "it_console_effects",
    effects_md,
    Column("consumer", String, nullable=False),
    Column("event_id", String, nullable=False),
)
PASSWORDS = {"olive": "olive-" + uuid.uuid4().hex, "victor": "victor-" + uuid.uuid4().hex}
fixed = threading.Event()  # the handler's bug, until the test fixes it


def charge(envelope, uow) -> None:
    """The handler: an order with a negative amount fails until the bug is fixed."""
    amount = envelope.payload.get("amount", 0)
    if amount < 0 and not fixed.is_set():
        raise ValueError(
            f"cannot charge a negative amount {amount} for order {envelope.aggregate_id}"
        )
    uow.session.execute(effects.insert().values(consumer=CONSUMER, event_id=str(envelope.event_id)))


CONSUMER = f"console-{uuid.uuid4().hex[:6]}"


@dataclass
class Served:
    url: str
    job: Job
    engine: Engine
    topic: str
    ids: dict[str, str]  # name -> event id


def produce(bootstrap: str, topic: str, rows: list[tuple[str, dict, str]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, payload, event_id in rows:
        headers = [
            ("id", event_id.encode()),
            ("eventType", b"Charge"),
            ("aggregateType", b"o"),
            ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ]
        producer.produce(
            topic, json.dumps(payload).encode(), key.encode(), headers=headers, partition=0
        )
    assert producer.flush(30) == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def served(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # Its own engine, disposed after: the session's engine may meet a Postgres crash later.
    engine = create_engine(stack.database_url())
    effects_md.create_all(engine)
    bootstrap, topic = stack.bootstrap_servers(), f"it-console-{uuid.uuid4().hex[:8]}"
    ids = {
        name: str(uuid.uuid4())
        for name in ("good1", "bad1", "bad2", "bad3", "behind", "edit", "good2")
    }
    rows = [
        ("order-1", {"amount": 5}, ids["good1"]),
        ("order-2", {"amount": -7}, ids["bad1"]),
        ("order-3", {"amount": -12}, ids["bad2"]),
        ("order-4", {"amount": -30}, ids["bad3"]),
        ("order-2", {"amount": 9}, ids["behind"]),  # held behind order-2's parked record
        ("order-5", {"amount": "x"}, ids["edit"]),  # a TypeError: fixed by editing its payload
        ("order-6", {"amount": 1}, ids["good2"]),
    ]
    produce(bootstrap, topic, rows)
    records = read_records(bootstrap, [topic], until=lambda got: len(got) >= len(rows), timeout=60)
    job = Job(
        name="payments",
        topics=(topic,),
        consumer=CONSUMER,
        handlers={"Charge": charge},
        database_url=stack.database_url(),
        bootstrap_servers=bootstrap,
        ledger=True,
    )
    job.inbox(engine).apply_partition(records)

    users = tmp_path_factory.mktemp("console") / "users"
    users.write_text(
        user_line("olive", "operator", PASSWORDS["olive"])
        + "\n"
        + user_line("victor", "viewer", PASSWORDS["victor"])
        + "\n"
    )
    settings = Settings(
        console_users_file=users, console_trace_url="http://traces.example/trace/{trace_id}"
    )
    endpoints = Endpoints(make_url(stack.database_url()), bootstrap, stack.connect_url(), PLAINTEXT)
    console = build_console(settings, [job], endpoints)
    try:
        with serving(console.app) as port:
            yield Served(f"http://127.0.0.1:{port}", job, engine, topic, ids)
    finally:
        console.close()
        engine.dispose()


def sign_in(page: Page, served: Served, name: str) -> None:
    page.goto(served.url + "/")
    expect(page).to_have_url(re.compile(r"/login"))
    page.get_by_label("Name").fill(name)
    page.get_by_label("Password").fill(PASSWORDS[name])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


def assert_accessible(page: Page) -> None:
    found = axe_violations(page)
    assert found == [], f"{page.url}: {found}"


def effect_counts(served: Served) -> dict[str, int]:
    with served.engine.connect() as conn:
        rows = conn.execute(
            select(effects.c.event_id, func.count())
            .where(effects.c.consumer == CONSUMER)
            .group_by(effects.c.event_id)
        ).all()
    return {e: int(n) for e, n in rows}


def parked_count(served: Served) -> int:
    with served.engine.connect() as conn:
        return int(
            conn.execute(select(func.count()).where(parked.c.consumer == CONSUMER)).scalar_one()
        )


def test_a_wrong_password_is_refused(page: Page, served: Served) -> None:
    page.goto(served.url + "/login")
    page.get_by_label("Name").fill("olive")
    page.get_by_label("Password").fill("not her password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("do not match")
    assert_accessible(page)
    assert page.request.get(served.url + "/failures", max_redirects=0).status == 303


def test_the_overview_shows_lag_parked_records_and_connectors(page: Page, served: Served) -> None:
    sign_in(page, served, "victor")
    card = page.locator("section.card", has_text="payments")
    expect(card).to_contain_text(CONSUMER)
    expect(card.locator("dt", has_text="Parked").locator("xpath=..")).to_contain_text("5")
    expect(page.get_by_role("img")).to_have_count(1)  # the lag and rate plot
    expect(page.get_by_role("heading", name="Connectors")).to_be_visible()
    expect(page.get_by_role("row", name=re.compile("RUNNING")).first).to_contain_text("0: RUNNING")
    assert_accessible(page)
    shot(page, "overview", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    expect(card).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1
    shot(page, "overview-phone", full_page=True)


def test_a_viewer_sees_the_group_but_cannot_act(page: Page, served: Served) -> None:
    sign_in(page, served, "victor")
    page.get_by_role("navigation").get_by_role("link", name="Failures").click()
    page.get_by_role("link", name=re.compile("cannot charge a negative amount")).click()
    expect(page.get_by_role("table")).to_contain_text("order-3")
    expect(page.get_by_role("button", name="Redrive this group")).to_have_count(0)
    cause = page.locator(".cause code").inner_text()
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    refused = page.request.post(
        served.url + "/act/redrive-group",
        form={
            "csrf": csrf or "",
            "request": uuid.uuid4().hex,
            "consumer": CONSUMER,
            "cause": cause,
        },
    )
    assert refused.status == 403
    assert "may look but not act" in refused.text()
    assert parked_count(served) == 5  # nothing redriven


def test_an_operator_redrives_a_fixed_group_once(page: Page, served: Served) -> None:
    sign_in(page, served, "olive")
    page.get_by_role("navigation").get_by_role("link", name="Failures").click()
    group = page.get_by_role("row", name=re.compile("cannot charge a negative amount"))
    expect(group).to_contain_text("ValueError")
    expect(group).to_contain_text("3")  # three orders, one cause: numbers and ids differ
    expect(page.get_by_role("row", name=re.compile("held behind"))).to_contain_text("1")
    assert_accessible(page)
    shot(page, "failures", full_page=True)
    page.get_by_role("link", name=re.compile("cannot charge a negative amount")).click()
    assert_accessible(page)
    shot(page, "group", full_page=True)
    form = {
        name: page.locator(f"form[action='/act/redrive-group'] input[name={name}]").get_attribute(
            "value"
        )
        or ""
        for name in ("csrf", "request", "consumer", "cause")
    }

    fixed.set()  # the handler's fix is deployed
    page.get_by_role("button", name="Redrive this group").click()
    expect(page.get_by_role("status")).to_contain_text("4 applied")  # three, and the one held
    again = page.request.post(served.url + "/act/redrive-group", form=form)  # a double click
    assert again.status == 200 and "already done" in again.text()

    counts = effect_counts(served)
    for name in ("bad1", "bad2", "bad3", "behind", "good1", "good2"):
        assert counts.get(served.ids[name]) == 1, name
    assert parked_count(served) == 1  # the record parked for its payload only
    with served.engine.connect() as conn:
        logged = conn.execute(
            select(operator_actions).where(
                operator_actions.c.detail["request"].astext == form["request"]
            )
        ).all()
    assert [(r.who, r.command, r.count) for r in logged] == [("olive", "console redrive group", 4)]
    page.get_by_role("navigation").get_by_role("link", name="Action log").click()
    expect(page.get_by_role("row", name=re.compile("console redrive group"))).to_contain_text(
        "olive"
    )
    assert_accessible(page)
    shot(page, "actions", full_page=True)


def test_an_edited_payload_is_applied_and_its_original_kept(page: Page, served: Served) -> None:
    sign_in(page, served, "olive")
    with served.engine.connect() as conn:
        record_id = conn.execute(
            select(parked.c.id).where(
                parked.c.consumer == CONSUMER, parked.c.event_id == served.ids["edit"]
            )
        ).scalar_one()
    page.goto(f"{served.url}/records/{CONSUMER}/{record_id}")
    expect(page.locator("dd.error")).to_contain_text("TypeError")
    expect(page.get_by_role("link", name="4bf92f3577b34da6a3ce929d0e0e4736")).to_have_attribute(
        "href", "http://traces.example/trace/4bf92f3577b34da6a3ce929d0e0e4736"
    )
    assert_accessible(page)
    shot(page, "record", full_page=True)
    page.get_by_label(re.compile("Payload")).fill('{"amount": 3}')
    page.get_by_role("button", name="Save the edit and retry").click()
    expect(page.get_by_role("status")).to_contain_text("1 applied")
    assert effect_counts(served).get(served.ids["edit"]) == 1
    assert parked_count(served) == 0
    with served.engine.connect() as conn:
        edit = conn.execute(
            select(operator_actions.c.detail).where(
                operator_actions.c.command == "console edit",
                operator_actions.c.detail["id"].astext == str(record_id),
            )
        ).scalar_one()
    import base64

    assert json.loads(base64.b64decode(edit["original"])) == {"amount": "x"}


def test_where_is_my_event(page: Page, served: Served) -> None:
    sign_in(page, served, "victor")
    page.get_by_role("navigation").get_by_role("link", name="Find an event").click()
    page.get_by_label("Event id").fill(served.ids["good1"])
    page.get_by_role("button", name="Find").click()
    expect(page.get_by_role("row", name=re.compile(CONSUMER))).to_contain_text(
        f"{served.topic}[0]@0"
    )
    page.get_by_role("link", name=re.compile("Read the watched jobs' topics")).click()
    expect(page.get_by_text(re.compile(r"at offset 0: applied"))).to_be_visible()
    assert_accessible(page)
    shot(page, "event", full_page=True)
    page.get_by_label("Event id").fill("not-an-id")
    page.get_by_role("button", name="Find").click()
    expect(page.get_by_role("alert")).to_contain_text("is not an event id")


def test_a_stopped_partition_shows_its_reason_and_a_rewind_preview(
    page: Page, served: Served
) -> None:
    reason = "the topic's id changed (re-created): offsets moved"
    where = (watermarks.c.consumer == CONSUMER, watermarks.c.topic == served.topic)
    with served.engine.begin() as conn:
        conn.execute(update(watermarks).where(*where).values(stopped=reason))
    try:
        sign_in(page, served, "olive")
        # The page shows it without a reload: its live part is fetched again every 5 s.
        stopped = page.locator("p.problem", has_text="Stopped")
        expect(stopped).to_contain_text(reason, timeout=15_000)
        page.locator("p.problem", has_text="Stopped").get_by_role("link").first.click()
        expect(page.get_by_text(f"stopped: {reason}")).to_be_visible()
        page.get_by_label(re.compile("New watermark")).fill("2")
        page.get_by_role("button", name="Preview").click()
        expect(page.get_by_role("status")).to_contain_text("from 6 to 2")
        assert_accessible(page)
        shot(page, "partition", full_page=True)
        page.get_by_label(re.compile("New watermark")).fill("99")
        page.get_by_role("button", name="Preview").click()
        expect(page.get_by_role("alert")).to_contain_text("is not a rewind")
    finally:
        with served.engine.begin() as conn:
            conn.execute(update(watermarks).where(*where).values(stopped=None))


def test_a_partition_whose_positions_went_back_is_resumed_by_its_runbook_path(
    page: Page, served: Served
) -> None:
    """The console offers no start-over of a partition stopped on positions gone back (it
    would skip a restored database's new events), but the runbook's readings of that stop, as
    the CLI does: a bad LSN is refused with a message, a new history resumes the partition and
    the action log records it."""
    reason = stops.went_back("orders-db", (90, 90), (120, 120), "e-1")
    where = (
        watermarks.c.consumer == CONSUMER,
        watermarks.c.topic == served.topic,
        watermarks.c.partition == 0,
    )
    with served.engine.begin() as conn:
        before = conn.execute(select(watermarks).where(*where)).one()
        conn.execute(update(watermarks).where(*where).values(stopped=reason))
    try:
        sign_in(page, served, "olive")
        # The partition's page reads its stop from the inbox when it is asked for
        page.goto(f"{served.url}/partitions/{CONSUMER}/{served.topic}/0")
        expect(page.get_by_role("heading", name="Resume")).to_be_visible()
        expect(page.get_by_role("button", name=re.compile("^Rebase"))).to_have_count(0)
        assert_accessible(page)
        page.get_by_label(re.compile("new timeline began")).fill("not-an-lsn")
        page.get_by_role("button", name="Resume with a new history").click()
        expect(page.get_by_role("alert")).to_contain_text("is not an LSN")
        page.goto(f"{served.url}/partitions/{CONSUMER}/{served.topic}/0")
        page.get_by_label(re.compile("new timeline began")).fill("0/64")
        page.get_by_role("button", name="Resume with a new history").click()
        expect(page.get_by_text("new history of orders-db from LSN 100")).to_be_visible()
        with served.engine.connect() as conn:
            after = conn.execute(select(watermarks).where(*where)).one()
            logged = conn.execute(
                select(operator_actions.c.detail)
                .where(operator_actions.c.command == "console rebase")
                .order_by(operator_actions.c.id.desc())
                .limit(1)
            ).scalar_one()
        assert after.stopped is None and after.epoch == before.epoch + 1
        assert after.offset == before.offset
        assert logged["new_history"] == {"orders-db": 100}
    finally:
        with served.engine.begin() as conn:
            conn.execute(
                update(watermarks)
                .where(*where)
                .values(
                    stopped=None, sources=before.sources, floors=before.floors, tops=before.tops
                )
            )


def test_an_action_without_the_session_token_is_refused(page: Page, served: Served) -> None:
    sign_in(page, served, "olive")
    refused = page.request.post(
        served.url + "/act/rewind",
        form={
            "csrf": "forged",
            "request": uuid.uuid4().hex,
            "consumer": CONSUMER,
            "topic": served.topic,
            "partition": "0",
            "offset": "-1",
        },
    )
    assert refused.status == 403
    with served.engine.connect() as conn:
        mark = conn.execute(
            select(watermarks.c.offset).where(watermarks.c.consumer == CONSUMER)
        ).scalar_one()
    assert mark == 6
