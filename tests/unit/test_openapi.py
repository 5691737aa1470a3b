"""What a service's OpenAPI document declares, without a database: the template's own answers
as problem+json on every operation that can get them, a route's own, the Idempotency-Key rules,
and a 405 that names the allowed methods."""

from __future__ import annotations

from fastapi.testclient import TestClient

from outboxkit_workshop.saga import orders
from service_template import ServiceSettings, create_app
from service_template.errors import PROBLEM

# Nothing listens there: the document and a 405 need no database.
UNREACHABLE = "postgresql+psycopg://nobody@127.0.0.1:9/none"


def app():
    settings = ServiceSettings(name="orders", database_url=UNREACHABLE, log_json=False)
    return create_app(settings, routers=[orders.router])


def test_every_operation_declares_the_answers_the_template_gives() -> None:
    paths = app().openapi()["paths"]
    declared = {
        (path, method): sorted(op["responses"])
        for path, ops in paths.items()
        for method, op in ops.items()
    }
    assert declared == {
        ("/health", "get"): ["200"],
        ("/ready", "get"): ["200", "503"],
        ("/metrics", "get"): ["200", "503"],
        ("/orders", "post"): ["201", "400", "409", "413", "422", "503"],
        ("/orders/{order_id}", "get"): ["200", "404", "422", "503"],
    }
    for ops in paths.values():
        for op in ops.values():
            for status, response in op["responses"].items():
                if status[0] in "45":
                    assert list(response["content"]) == [PROBLEM], (status, response)
    assert "Retry-After" in paths["/orders"]["post"]["responses"]["503"]["headers"]


def test_the_idempotency_key_rules_are_in_the_document() -> None:
    [header] = app().openapi()["paths"]["/orders"]["post"]["parameters"]
    assert header["name"] == "Idempotency-Key" and header["in"] == "header"
    rules = header["schema"]
    assert (rules["minLength"], rules["maxLength"]) == (1, 255)
    assert rules["pattern"] == r"^[\x20-\x7e]{1,255}$"


def test_a_method_the_path_does_not_have_is_a_405_naming_the_allowed_ones() -> None:
    response = TestClient(app()).delete("/orders")
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["status"] == 405
