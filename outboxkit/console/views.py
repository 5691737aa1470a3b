"""The console's pages (GET): the overview and its live part, failures grouped by cause, a
group's records, a record, where an event is, a partition (stopped reason, rewind and rebase
previews) and the action log. Reading only."""

from __future__ import annotations

import functools
import json
import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from inbox import operations, stops
from outboxkit.console import auth, reads
from outboxkit.console.actions import ActionRefused
from outboxkit.console.kafka_gate import KafkaGate, KafkaUnanswered
from outboxkit.console.overview import OverviewReader
from outboxkit.console.shapes import plot
from outboxkit.console.site import Site, signed_in

router = APIRouter()
# A W3C traceparent: version, trace id, parent id, flags, in lower-case hex. Only such an id
# goes into the trace link (a header is the producer's to write).
TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
FILTERS = ("consumer", "topic", "key", "event_type", "hours", "event_id")
MAX_HOURS = 24 * 366 * 10  # ten years: further back than any parked record


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request) -> Response:
    """Consumers, connectors, databases."""
    return await signed_in(
        request, lambda s, u: s.page(request, u, "overview.html", **overview_of(s.reader))
    )


@router.get("/live/overview", response_class=HTMLResponse)
async def live_overview(request: Request) -> Response:
    """The overview's live part, which the page's script fetches every few seconds."""
    return await signed_in(
        request, lambda s, u: s.page(request, u, "overview_live.html", **overview_of(s.reader))
    )


@router.get("/failures", response_class=HTMLResponse)
async def failures(request: Request) -> Response:
    """Parked records grouped by cause, filtered."""
    filters, problem = filters_of(request.query_params)
    chosen = request.query_params.get("consumer", "")

    def build(site: Site, user: auth.User) -> Response:
        groups: list[reads.Group] = []
        engines = site.engines
        for consumer in [chosen] if chosen in engines else list(engines):
            with engines[consumer].connect() as conn:
                groups += reads.failure_groups(conn, consumer, filters)
        groups.sort(key=lambda g: -g.count)
        return site.page(
            request, user, "failures.html", groups=groups, filters=filters, problem=problem,
            consumers=list(engines), chosen=chosen, query=_query(request),
        )  # fmt: skip

    return await signed_in(request, build)


@router.get("/failures/group", response_class=HTMLResponse)
async def group(request: Request, consumer: str, cause: str, after: int = 0) -> Response:
    """A page of one failure group's records, and its redrive."""
    filters, problem = filters_of(request.query_params)

    def build(site: Site, user: auth.User) -> Response:
        with site.engine(consumer).connect() as conn:
            records = reads.group_records(conn, consumer, cause, filters, after=after)
        return site.page(
            request, user, "group.html", consumer=consumer, cause=cause, records=records,
            filters=filters, problem=problem, request_token=secrets.token_urlsafe(16),
            more=len(records) == reads.PAGE, query=_query(request),
        )  # fmt: skip

    return await signed_in(request, build)


@router.get("/records/{consumer}/{record_id}", response_class=HTMLResponse)
async def record(request: Request, consumer: str, record_id: int) -> Response:
    """A parked or skipped record: fields, history, headers, payload, and its actions."""

    def build(site: Site, user: auth.User) -> Response:
        found = operations.show(site.engine(consumer), record_id)
        if found is None or found["consumer"] != consumer:
            return site.problem(request, user, 404, f"no record {record_id} of {consumer}")
        return site.page(
            request, user, "record.html", consumer=consumer, record=found,
            payload=_text(found["raw_value"]), trace=_trace(found, site.config.trace_url),
            request_token=secrets.token_urlsafe(16),
        )  # fmt: skip

    return await signed_in(request, build)


@router.get("/events", response_class=HTMLResponse)
async def events(request: Request, id: str = "", scan: int = 0) -> Response:
    """Where is my event? The databases at once; the topics when asked (``scan``)."""
    event_id = id.strip()

    def build(site: Site, user: auth.User) -> Response:
        found = (
            whereabouts(site.reader, event_id, scan=site.operator.gate if scan else None)
            if event_id
            else None
        )
        return site.page(request, user, "event.html", event_id=event_id, found=found)

    return await signed_in(request, build)


@router.get("/partitions/{consumer}/{topic}/{partition}", response_class=HTMLResponse)
async def partition(
    request: Request, consumer: str, topic: str, partition: int, offset: int | None = None
) -> Response:
    """A partition: its state, why it stopped, a rewind's preview, a rebase's plan."""

    def build(site: Site, user: auth.User) -> Response:
        view = site.reader.partition(consumer, topic, partition)
        plan = rebase = problem = None
        try:
            if offset is not None:
                plan = site.operator.rewind_plan(consumer, topic, partition, offset)
            if view is not None and view.stopped:
                rebase = site.operator.rebase_plan(consumer, topic)
        except ActionRefused as exc:
            problem = str(exc)
        stopped = view.stopped if view is not None else None
        gone_back, unclaimed = stops.held(stopped)
        return site.page(
            request, user, "partition.html", consumer=consumer, topic=topic,
            partition=partition, view=view, plan=plan, offset=offset, rebase=rebase,
            problem=problem, request_token=secrets.token_urlsafe(16), gone_back=gone_back,
            unclaimed=unclaimed, stopped_source=stops.stopped_source(stopped or ""),
        )  # fmt: skip

    return await signed_in(request, build)


@router.get("/actions", response_class=HTMLResponse)
async def action_log(request: Request) -> Response:
    """The operator action log of every watched database, newest first."""

    def build(site: Site, user: auth.User) -> Response:
        rows: list[dict[str, Any]] = []
        for engine in {str(e.url): e for e in site.engines.values()}.values():
            with engine.connect() as conn:
                rows += reads.actions(conn)
        rows.sort(key=lambda r: r["at"], reverse=True)
        return site.page(request, user, "actions.html", rows=rows[:100])

    return await signed_in(request, build)


def overview_of(reader: OverviewReader) -> dict[str, Any]:
    """The overview's template context: the view, each consumer's plot, when it was read."""
    view = reader.read()
    plots = {
        c.consumer: plot(
            [
                (
                    "lag (records)",  # a look without Kafka's answer is no point: not 0
                    [(s.at, float(s.lag)) for s in (c.samples or []) if s.lag is not None],
                ),
                ("applied (offsets/s)", c.samples.rates() if c.samples else []),
            ],
            now=view.read_at,
            title=c.consumer,
        )
        for c in view.consumers
    }
    return {"view": view, "plots": plots, "read_at": datetime.fromtimestamp(view.read_at, UTC)}


def filters_of(source: Any) -> tuple[reads.Filters, str | None]:
    """The failure filters a query string or form gives, and what was wrong with them."""
    since, problem = None, None
    hours = str(source.get("hours", "") or "").strip()
    if hours:
        try:
            within = float(hours)
            if not 0 < within <= MAX_HOURS:
                raise ValueError(hours)
            since = datetime.now(UTC) - timedelta(hours=within)
        except ValueError:
            problem = f"hours: {hours!r} is not a number of hours (above 0, at most {MAX_HOURS})"
    event_id = str(source.get("event_id", "") or "").strip()
    if event_id and not reads.valid_uuid(event_id):
        problem, event_id = f"{event_id!r} is not an event id (a UUID)", ""
    text = {k: str(source.get(k, "") or "").strip() for k in ("topic", "key", "event_type")}
    for name, value in list(text.items()):
        if "\x00" in value:  # Postgres text cannot hold it: no record can match
            problem, text[name] = f"{name}: a NUL character cannot be in a {name}", ""
    return reads.Filters(**text, since=since, event_id=event_id), problem


def _query(request: Request) -> str:
    return urlencode({k: v for k, v in request.query_params.items() if k in FILTERS and v})


def whereabouts(
    reader: OverviewReader, event_id: str, *, scan: KafkaGate | None = None
) -> dict[str, Any]:
    """Where one event is: outbox and scheduled rows, each consumer's ledger, window, parked
    and skipped records, and (``scan``: through that gate) its offsets on the topics with the
    audit's verdict, or what kept Kafka from telling (``topics_problem``)."""
    if not reads.valid_uuid(event_id):
        return {"problem": f"{event_id!r} is not an event id (a UUID)"}
    found: dict[str, Any] = {"outbox": [], "scheduled": [], "consumers": {}, "topics": None}
    for name, engine in reader.databases.items():
        with engine.connect() as conn:
            outbox, scheduled = reads.outbox_side(conn, event_id)
        found["outbox"] += [{**r, "database": name} for r in outbox]
        found["scheduled"] += [{**r, "database": name} for r in scheduled]
    for watched in reader.watched:
        with watched.engine.connect() as conn:
            found["consumers"][watched.consumer] = reads.inbox_side(
                conn, watched.consumer, event_id
            )
    if scan is not None:
        try:
            found["topics"] = _scan(reader, event_id, scan)
        except KafkaUnanswered as exc:
            found["topics_problem"] = str(exc)
    return found


def _scan(reader: OverviewReader, event_id: str, gate: KafkaGate) -> list[dict[str, Any]]:
    """The event's offsets on each watched job's topics, and the audit's verdict for it."""
    from spark_consumers import audit

    verdicts = []
    for watched in reader.watched:
        options = {k: v for k, v in watched.kafka.items() if k != "bootstrap.servers"}
        bootstrap = watched.kafka["bootstrap.servers"]
        read = functools.partial(audit.read_topics, bootstrap, watched.topics, options)
        records, _ = gate.read(bootstrap, read)
        with watched.engine.connect() as conn:
            rows = audit.inbox_rows(conn, watched.consumer, watched.topics)
        for (topic, partition), found in sorted(records.items()):
            offsets = tuple(o for o, e in found if e == event_id)
            if offsets:
                event = audit.Event(event_id, offsets)
                verdicts.append({
                    "consumer": watched.consumer, "topic": topic, "partition": partition,
                    "offsets": offsets, "verdict": audit.verdict(topic, partition, event, rows),
                })  # fmt: skip
    return verdicts


def _text(value: bytes | None) -> str:
    """A payload as an operator reads and edits it: indented JSON, else its text."""
    if value is None:
        return ""
    try:
        return json.dumps(json.loads(value), indent=2)
    except ValueError:
        return value.decode("utf-8", errors="replace")


def _trace(found: dict[str, Any], url: str | None) -> tuple[str, str | None] | None:
    """The record's trace id (its traceparent header) and its page in the tracing UI."""
    headers = dict(found["raw_headers"])
    said = bytes(headers.get("traceparent") or b"").decode(errors="replace")
    shape = TRACEPARENT.fullmatch(said)
    if shape is None or shape.group(1) == "0" * 32:  # W3C: an all-zero trace id is invalid
        return None
    return shape.group(1), (url.replace("{trace_id}", shape.group(1)) if url else None)
