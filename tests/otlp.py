"""A small OTLP/HTTP trace receiver in the test process: the services and the Spark consumers run
in other processes and export their spans to it (protobuf ExportTraceServiceRequest on
/v1/traces), and tests read them back."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, as far as the tests read it (ids as lower-case hex)."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace id, span id)
    error: bool


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ExportTraceServiceRequest."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        service=str(resource.get("service.name")),
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex() or None,
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=tuple(
                            (link.trace_id.hex(), link.span_id.hex()) for link in span.links
                        ),
                        error=span.status.code == 2,  # STATUS_CODE_ERROR
                    )
                )
    return found


class OtlpReceiver:
    """Listens on a free loopback port until closed; ``env()`` points an exporter at it."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    received = decode(body)
                    with receiver._lock:
                        receiver.spans.extend(received)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def env(self) -> dict[str, str]:
        """OTEL_* settings exporting every span here, soon after it ended."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def by_id(self) -> dict[str, ReceivedSpan]:
        with self._lock:
            return {s.span_id: s for s in self.spans}

    def wait(
        self, trace_id: str, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 120
    ) -> list[ReceivedSpan]:
        """The trace's spans once ``done`` says they are complete and none came for a second."""
        deadline = time.monotonic() + timeout
        seen = -1
        while time.monotonic() < deadline:
            spans = self.of_trace(trace_id)
            if done(spans) and len(spans) == seen:
                return spans
            seen = len(spans)
            time.sleep(1.0)
        return self.of_trace(trace_id)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
