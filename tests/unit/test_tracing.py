"""Tracing: when the environment turns it on, and the spans a publish and an inbox slice make
(recorded by an SDK provider of the test's own, never the process's global one)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from inbox.decision import Action
from inbox.tracing import RecordSpans, ended
from outbox.publish import Outbox
from outbox.unit import UnitOfWork
from outboxkit.kernel.envelope import make_envelope
from outboxkit.kernel.tracing import exporters_wanted, spans
from outboxkit.kernel.tracing.context import TraceContext
from outboxkit.kernel.wire.record import encode, read


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, ()),
        ({"OTEL_SERVICE_NAME": "orders"}, ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "console"}, ("console",)),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ("otlp", "console")),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ()),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ()),
    ],
)
def test_tracing_is_on_only_when_the_environment_asks(environ, wanted):
    assert exporters_wanted(environ) == wanted


def test_an_exporter_not_installed_is_refused_with_what_to_use():
    with pytest.raises(ValueError, match="zipkin is not available; use otlp or console"):
        exporters_wanted({"OTEL_TRACES_EXPORTER": "zipkin"})


def test_without_the_sdk_the_context_still_travels_with_fresh_ids():
    parent = TraceContext.new()
    child = spans.start("publish", parent=parent)
    assert not child.recording
    assert child.context.trace_id == parent.trace_id
    assert child.context.span_id != parent.span_id
    root = spans.start("request", parent=None)
    assert root.context.trace_id != parent.trace_id
    child.end()


@pytest.fixture
def recorded(monkeypatch):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(spans, "_tracer", lambda: provider.get_tracer(spans.TRACER))
    monkeypatch.setattr(spans, "enabled", lambda: True)  # as configure() makes it in a process
    return exporter


class UnwrittenOutbox(Outbox):
    """Validates events as the outbox does, writes nothing."""

    def publish_many(self, session, events):
        return [
            make_envelope(
                aggregate_type=e.aggregate_type,
                aggregate_id=e.aggregate_id,
                event_type=e.event_type,
                payload=e.payload,
                headers=e.headers,
            )[0]
            for e in events
        ]


def test_an_event_carries_the_context_of_its_publish_span(recorded):
    request = TraceContext.new()
    uow = UnitOfWork(None, UnwrittenOutbox(), request)
    event = uow.publish(
        aggregate_type="order", aggregate_id="o-1", event_type="OrderPlaced", payload={}
    )
    (publish,) = recorded.get_finished_spans()
    assert publish.kind is SpanKind.PRODUCER
    assert f"{publish.parent.span_id:016x}" == request.span_id
    assert event.traceparent == spans.trace_context(publish.context).header()
    assert publish.attributes["outboxkit.event.id"] == str(event.event_id)
    assert publish.attributes["outboxkit.aggregate.id"] == "o-1"


def test_a_consumed_event_is_applied_in_a_child_span_and_its_replies_continue_it(recorded):
    placed = UnitOfWork(None, UnwrittenOutbox(), TraceContext.new()).publish(
        aggregate_type="order", aggregate_id="o-1", event_type="OrderPlaced", payload={}
    )
    batch = spans.start("micro-batch", parent=None)
    with spans.current_context(batch.context):
        slice_spans = RecordSpans("payments", [read(encode(placed, partition=2, offset=41))])
    batch.end()
    uow = UnitOfWork(None, UnwrittenOutbox(), event_spans=slice_spans.by_event_id())
    reply = uow.for_event(placed).publish(
        aggregate_type="payment", aggregate_id="o-1", event_type="PaymentCaptured", payload={}
    )
    ended(slice_spans.started[0], Action.APPLY, handler_seconds=0.002)
    finished = {s.name: s for s in recorded.get_finished_spans()}
    apply = finished["payments apply OrderPlaced"]
    publish = finished["publish payment PaymentCaptured"]
    assert apply.kind is SpanKind.CONSUMER
    assert spans.trace_context(apply.parent).header() == placed.traceparent
    assert [spans.trace_context(link.context) for link in apply.links] == [batch.context]
    assert apply.attributes["messaging.destination.partition.id"] == "2"
    assert apply.attributes["messaging.kafka.offset"] == 41
    assert apply.attributes["outboxkit.inbox.decision"] == "apply"
    assert apply.attributes["outboxkit.handler.ms"] == 2.0
    assert publish.parent.span_id == apply.context.span_id
    assert reply.traceparent == spans.trace_context(publish.context).header()


def test_without_the_sdk_the_inbox_makes_no_spans_and_replies_continue_the_event():
    placed = UnitOfWork(None, UnwrittenOutbox(), TraceContext.new()).publish(
        aggregate_type="order", aggregate_id="o-1", event_type="OrderPlaced", payload={}
    )
    slice_spans = RecordSpans("payments", [read(encode(placed, partition=2, offset=41))])
    assert slice_spans.by_event_id() == {}
    assert slice_spans.context(slice_spans.started[0]) is None
    ended(slice_spans.started[0], Action.APPLY, handler_seconds=0.002)  # a no-op, no error
    uow = UnitOfWork(None, UnwrittenOutbox(), event_spans=slice_spans.by_event_id())
    reply = uow.for_event(placed).publish(
        aggregate_type="payment", aggregate_id="o-1", event_type="PaymentCaptured", payload={}
    )
    cause, effect = TraceContext.parse(placed.traceparent), TraceContext.parse(reply.traceparent)
    assert cause is not None and effect is not None
    assert effect.trace_id == cause.trace_id and effect.span_id != cause.span_id
