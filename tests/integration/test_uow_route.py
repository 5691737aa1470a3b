"""Where a request's transaction ends, on real Postgres: a synchronous route that returns a built
response commits in the thread it ran in (one hop to the thread pool per request); other routes
commit after FastAPI serialised their result; an error status or a failed commit leaves nothing."""

from __future__ import annotations

import threading
from typing import Annotated, Any

import pytest
from fastapi import Depends
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, event, text

from outboxkit_workshop.saga.common import migrations_of
from service_template import ServiceSettings, UnitOfWork, create_app, service_router, unit_of_work
from service_template import uow as uow_module

router = service_router()
UoW = Annotated[UnitOfWork, Depends(unit_of_work)]
threads: dict[str, int] = {}
commits: list[int] = []


def _insert(uow: UnitOfWork, name: str) -> None:
    threads[name] = threading.get_ident()
    uow.session.execute(text("INSERT INTO uow_route_rows (name) VALUES (:name)"), {"name": name})


@router.post("/built/{name}")
def built(name: str, uow: UoW) -> Any:
    _insert(uow, name)
    return JSONResponse({"name": name}, status_code=201)


@router.post("/refused/{name}")
def refused(name: str, uow: UoW) -> Any:
    _insert(uow, name)
    return JSONResponse({"detail": "no"}, status_code=400)


@router.post("/serialised/{name}")
def serialised(name: str, uow: UoW) -> dict[str, str]:
    _insert(uow, name)
    return {"name": name}


@router.post("/twice/{name}")
def twice(name: str, uow: UoW) -> Any:
    _insert(uow, name)
    _insert(uow, name)  # the deferred unique key fails at commit, in this thread
    return JSONResponse({"name": name}, status_code=201)


@pytest.fixture(scope="module")
def served(stack):
    url = stack.add_service("uow_route")
    migrations_of("orders").upgrade(url)
    admin = create_engine(url)
    with admin.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE IF NOT EXISTS uow_route_rows (name text,"
                " UNIQUE (name) DEFERRABLE INITIALLY DEFERRED)"
            )
        )
    # No releaser: its passes would commit on the engine whose commits this module counts.
    settings = ServiceSettings(
        name="uow-route",
        database_url=url,
        log_json=False,
        outbox={"release": {"enabled": False}},  # type: ignore[arg-type]
    )
    app = create_app(settings, routers=[router])
    engine = app.state.service.engine
    event.listen(engine, "commit", lambda conn: commits.append(threading.get_ident()))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, admin
    admin.dispose()


def _rows(admin: Any, name: str) -> int:
    with admin.connect() as conn:
        query = text("SELECT count(*) FROM uow_route_rows WHERE name = :name")
        return int(conn.execute(query, {"name": name}).scalar_one())


def test_a_built_response_commits_in_the_thread_the_route_ran_in(served, monkeypatch):
    client, admin = served
    commits.clear()
    hops: list[Any] = []
    hop = uow_module.run_in_threadpool

    async def counted(function: Any, *args: Any) -> Any:
        hops.append(function)
        return await hop(function, *args)

    monkeypatch.setattr(uow_module, "run_in_threadpool", counted)
    assert client.post("/built/a").status_code == 201
    assert _rows(admin, "a") == 1
    assert commits == [threads["a"]]
    assert hops == []  # no second hop to the thread pool to commit


def test_an_error_status_rolls_back(served):
    client, admin = served
    commits.clear()
    assert client.post("/refused/b").status_code == 400
    assert _rows(admin, "b") == 0 and commits == []


def test_a_serialised_result_commits_after_the_route_returned(served):
    client, admin = served
    commits.clear()
    answer = client.post("/serialised/c")
    assert answer.status_code == 200 and answer.json() == {"name": "c"}
    assert _rows(admin, "c") == 1 and len(commits) == 1


def test_a_commit_that_fails_in_the_route_thread_is_an_error_and_leaves_nothing(served):
    client, admin = served
    answer = client.post("/twice/d")
    assert answer.status_code >= 400
    assert answer.headers["content-type"] == "application/problem+json"
    assert _rows(admin, "d") == 0
    # The connection went back to the pool in a usable state: the next request commits.
    assert client.post("/built/e").status_code == 201 and _rows(admin, "e") == 1
