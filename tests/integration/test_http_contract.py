"""The three saga services against their own OpenAPI documents, on real Postgres: schemathesis
generates requests from each document (valid and invalid) and runs every check on each answer:
no 5xx, every status and content type declared, every body and header as documented, valid
input accepted, invalid input refused, 405 with Allow for a method the path does not have."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from fastapi import APIRouter
from hypothesis import HealthCheck, given, settings
from schemathesis.generation.modes import GenerationMode

from outboxkit_workshop.saga import orders, payments, shipping
from outboxkit_workshop.saga.common import migrations_of
from service_template import ServiceSettings, create_app

pytestmark = pytest.mark.integration

ROUTERS: dict[str, APIRouter] = {
    "orders": orders.router,
    "payments": payments.router,
    "shipping": shipping.router,
}
EXAMPLES = 150  # per operation: ~1,000 requests over the three services


def service_schema(stack: Any, service: str) -> Any:
    url = stack.add_service(f"http_{service}")
    migrations_of(service).upgrade(url)
    app = create_app(
        ServiceSettings(name=service, database_url=url, log_json=False, api_docs=True),
        routers=[ROUTERS[service]],
        migrations=[migrations_of(service)],
    )
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def operations(schema: Any) -> list[Any]:
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("service", sorted(ROUTERS))
def test_each_service_does_what_its_document_says(stack: Any, service: str) -> None:
    """Valid and invalid requests for every operation of the service's document; every
    schemathesis check on every answer. A failure names the operation and the request."""
    schema = service_schema(stack, service)
    ran = []
    for operation in operations(schema):
        raw = operation.definition.raw
        takes_input = bool(raw.get("parameters")) or "requestBody" in raw
        modes = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if takes_input else [])
        for mode in modes:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
            def check(case: Any) -> None:
                case.call_and_validate()

            check()
            ran.append(f"{operation.method.upper()} {operation.path} {mode.value}")
    # /health, /ready, /metrics, and the service's own routes, valid and invalid input each.
    assert len(ran) >= 5, ran
