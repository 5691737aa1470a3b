"""What a service's HTTP surface shows of itself, without a database (nothing listens at its
URL): no API documentation unless asked, the security headers on every answer, a /ready that
says what is wrong without the database's own words, and /metrics behind the scraper's token
when one is configured."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from outboxkit_workshop.saga import orders
from service_template import ServiceSettings, create_app
from service_template.guards import Scrapes

UNREACHABLE = "postgresql+psycopg://nobody@127.0.0.1:9/none"


def client(**settings: object) -> TestClient:
    app = create_app(
        ServiceSettings(name="orders", database_url=UNREACHABLE, log_json=False, **settings),
        routers=[orders.router],
    )
    return TestClient(app, base_url="http://orders.test")


def test_the_api_documentation_is_served_only_when_asked() -> None:
    with client() as hidden:
        assert hidden.get("/docs").status_code == 404
        assert hidden.get("/openapi.json").status_code == 404
        assert hidden.get("/redoc").status_code == 404
    with client(api_docs=True) as shown:
        assert shown.get("/openapi.json").json()["paths"]["/orders"]
        docs = shown.get("/docs")
        assert docs.status_code == 200 and "content-security-policy" not in docs.headers


def test_every_answer_has_the_security_headers() -> None:
    with client() as api:
        for answer in (
            api.get("/health"),
            api.get("/nowhere"),
            api.post("/orders", content=b"{", headers={"content-type": "application/json"}),
            api.post("/orders", content=b"x" * (70 * 1024)),  # over the body limit: a 413
        ):
            headers = answer.headers
            assert headers["x-content-type-options"] == "nosniff", answer.status_code
            assert headers["x-frame-options"] == "DENY"
            assert headers["referrer-policy"] == "no-referrer"
            assert "default-src 'none'" in headers["content-security-policy"]
            assert headers["cache-control"] == "no-store"


def test_ready_says_the_database_is_unreachable_without_its_words() -> None:
    with client() as api:
        answer = api.get("/ready")
    assert answer.status_code == 503
    body = answer.json()
    assert "database unreachable" in body["detail"]
    assert "127.0.0.1" not in answer.text and "nobody" not in answer.text


def test_metrics_ask_for_the_scrapers_token_when_one_is_set(tmp_path: Path) -> None:
    token = tmp_path / "metrics.token"
    token.write_text("s3cret-token\n")
    with client(metrics_token_file=token) as api:
        assert api.get("/metrics").status_code == 401
        wrong = {"authorization": "Bearer nope"}
        assert api.get("/metrics", headers=wrong).status_code == 401
        right = api.get("/metrics", headers={"authorization": "Bearer s3cret-token"})
        assert right.status_code == 200 and "http_request" in right.text
    with client() as open_metrics:
        assert open_metrics.get("/metrics").status_code == 200


def test_close_scrapes_share_one_scrape() -> None:
    made: list[int] = []
    scrapes = Scrapes(lambda: str(len(made.append(1) or made)).encode(), fresh=60.0)
    assert scrapes.latest() == scrapes.latest() == b"1"
    assert len(made) == 1
    scrapes.fresh = 0.0
    assert scrapes.latest() == b"2"
