"""The Connect REST client's PUT of a connector config: retried while Connect says the request
may be (rebalancing, its config topic not written just after a broker was lost), refused at
once otherwise."""

from __future__ import annotations

import httpx
import pytest

from cdc.connect import ConnectClient, ConnectError, retryable

TRANSIENT = (
    "Failed to write to config topic; this may be due to a transient error and the request can "
    "be safely retried"
)


def client_answering(*answers: tuple[int, str]) -> tuple[ConnectClient, list[int]]:
    """A client whose worker gives ``answers`` in turn (status, message), then 201."""
    seen: list[int] = []

    def worker(request: httpx.Request) -> httpx.Response:
        seen.append(len(seen))
        if len(seen) <= len(answers):
            status, message = answers[len(seen) - 1]
            return httpx.Response(status, json={"error_code": status, "message": message})
        return httpx.Response(201, json={"name": "c", "config": {}})

    client = ConnectClient("http://connect:8083")
    client._http = httpx.Client(transport=httpx.MockTransport(worker))
    return client, seen


def test_a_config_put_the_cluster_could_not_write_is_retried_until_taken():
    client, seen = client_answering((500, TRANSIENT), (409, "rebalancing"), (500, TRANSIENT))
    client.put_config("c", {"connector.class": "x"}, wait=30)
    assert len(seen) == 4


def test_a_refused_config_fails_at_once_with_connect_s_message():
    client, seen = client_answering((400, "Connector configuration is invalid"))
    with pytest.raises(ConnectError, match="HTTP 400: Connector configuration is invalid"):
        client.put_config("c", {"connector.class": "x"}, wait=30)
    assert len(seen) == 1


def test_only_what_connect_calls_retryable_is():
    assert retryable(409, {"message": "rebalance"})
    assert retryable(500, {"message": TRANSIENT})
    assert not retryable(500, {"message": "NullPointerException"})
    assert not retryable(400, {"message": TRANSIENT})


def test_tasks_run_a_config_only_once_every_task_was_made_from_it() -> None:
    """After an update the old tasks still report RUNNING: `cdc apply` waits until the tasks'
    configs are the new one (a secret's reference, which a worker may show resolved, aside)."""
    tasks: list[dict[str, object]] = []

    def worker(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/connectors/c/tasks"
        return httpx.Response(200, json=tasks)

    client = ConnectClient("http://connect:8083")
    client._http = httpx.Client(transport=httpx.MockTransport(worker))
    new = {"topic.prefix": "shop_v2", "database.password": "${file:/s:p}"}
    assert not client.tasks_run("c", new)  # no task yet
    tasks.append({"id": {"task": 0}, "config": {"topic.prefix": "shop", "task.class": "T"}})
    assert not client.tasks_run("c", new)  # the old config
    tasks[0]["config"] = {"topic.prefix": "shop_v2", "database.password": "s3cret"}
    assert client.tasks_run("c", new)


def test_stored_sources_are_the_server_names_of_the_connector_s_offsets() -> None:
    answers = {
        "/connectors/c/offsets": httpx.Response(
            200,
            json={
                "offsets": [
                    {"partition": {"server": "shop"}, "offset": {"lsn": 1}},
                    {"partition": {"server": "shop_v2"}, "offset": {"lsn": 2}},
                    {"partition": {"server": "shop"}, "offset": {"lsn": 3}},
                ]
            },
        ),
        "/connectors/gone/offsets": httpx.Response(404, json={"message": "not found"}),
    }
    client = ConnectClient("http://connect:8083")
    client._http = httpx.Client(transport=httpx.MockTransport(lambda r: answers[r.url.path]))
    assert client.stored_sources("c") == ["shop", "shop_v2"]
    assert client.stored_sources("gone") == []
