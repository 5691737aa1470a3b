"""Tracing, in one package: the W3C trace context an event carries
(`outboxkit.kernel.tracing.context`), the spans of the units of work
(`outboxkit.kernel.tracing.spans`; the inbox's per-record spans are in `inbox.tracing`), and here
the set-up.

The OpenTelemetry SDK of a process, set up from the standard ``OTEL_*`` environment: called by
each composition root (a service's app factory, the consumer driver, a Spark Python worker),
never at import. Off unless the environment asks for it: spans are then not recorded, and the
``traceparent`` events carry is made of fresh ids (`outboxkit.kernel.tracing.context`)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)

EXPORTERS = ("otlp", "console")  # OTEL_TRACES_EXPORTER values this set-up understands
PROTOCOL = "http/protobuf"  # the OTLP exporter installed (opentelemetry-exporter-otlp-proto-http)
_configured_in: int | None = None  # the PID whose SDK is set up (Spark forks Python workers)
_flush_paused_until = 0.0


def exporters_wanted(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The span exporters ``environ`` asks for; empty: tracing off.

    OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off; OTEL_TRACES_EXPORTER lists
    exporters (otlp, console); without it, an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) means otlp. Nothing set: off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ()
    named = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if named:
        wanted = tuple(dict.fromkeys(n.strip() for n in named.split(",") if n.strip()))
        if wanted == ("none",):
            return ()
        unknown = [n for n in wanted if n not in EXPORTERS]
        if unknown:
            raise ValueError(
                f"OTEL_TRACES_EXPORTER={named}: {', '.join(unknown)} is not available; use "
                f"{' or '.join(EXPORTERS)} (or none)"
            )
        return wanted
    endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return ("otlp",) if any(environ.get(e) for e in endpoints) else ()


def _check_protocol(environ: Mapping[str, str]) -> None:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = environ.get(name)
        if protocol:
            if protocol != PROTOCOL:
                raise ValueError(
                    f"{name}={protocol}: only {PROTOCOL} is installed; point it at the "
                    "collector's OTLP/HTTP port (4318) with that protocol"
                )
            return


def configure(service_name: str) -> bool:
    """Set up this process's tracer provider when the environment asks for tracing (once per
    process); ``service_name`` is the default of OTEL_SERVICE_NAME. True when spans are
    recorded."""
    global _configured_in
    if _configured_in == os.getpid():
        return True
    wanted = exporters_wanted(os.environ)
    if not wanted:
        return False
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    if isinstance(trace.get_tracer_provider(), TracerProvider):  # forked from a set-up parent
        _configured_in = os.getpid()
        return True
    _check_protocol(os.environ)
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": service_name}))
    provider = TracerProvider(resource=resource)  # OTEL_TRACES_SAMPLER: parent-based by default
    for name in wanted:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
    _configured_in = os.getpid()
    log.info("tracing on: %s, service %s", ",".join(wanted), resource.attributes["service.name"])
    return True


def flush(timeout_millis: int = 500) -> None:
    """Export the spans ended so far before returning (a Spark worker may be killed or reused
    for another job after its task: spans still queued there would be lost).

    A collector that is down must not slow the consumers: a flush waits at most
    ``timeout_millis``, and after one that timed out none is waited for during a minute (the
    spans stay queued for the exporter's own retries)."""
    global _flush_paused_until
    if _configured_in != os.getpid() or time.monotonic() < _flush_paused_until:
        return
    from opentelemetry import trace

    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force_flush is not None and not force_flush(timeout_millis):
        _flush_paused_until = time.monotonic() + 60
