"""Connectors that must not run side by side: one source name for two databases, two
connectors on one outbox, a running connector's source renamed."""

from __future__ import annotations

from cdc.collisions import Capture, capture_of, captures, collisions, renamed
from cdc.config import ConnectorSettings, build_connector_config


def config(name: str, *, host: str = "db", database: str = "shop", server: str = "shop") -> dict:
    settings = ConnectorSettings(name, host, 5432, database, "shop_cdc", server_name=server)
    return build_connector_config(settings)


def capture(name: str, **kwargs: str) -> Capture:
    found = capture_of(name, config(name, **kwargs))
    assert found is not None
    return found


def test_one_source_name_for_two_databases_is_refused_naming_both() -> None:
    (problem,) = collisions(capture("b", database="shop_2"), [capture("a")])
    assert "connector a already uses the source name 'shop'" in problem
    assert "database shop at db:5432" in problem and "OUTBOXKIT_SERVER_NAME" in problem


def test_a_second_connector_on_one_outbox_is_refused() -> None:
    (problem,) = collisions(capture("b", server="shop_b"), [capture("a")])
    assert "connector a already captures public.outbox" in problem


def test_connectors_of_their_own_run_side_by_side() -> None:
    own = capture("b", database="shop_2", server="shop_2")
    assert collisions(own, [capture("a"), own]) == []
    # a host named in another case is the same host
    assert collisions(capture("b", host="DB", server="x"), [capture("a")]) != []


def test_renaming_a_running_connector_s_source_is_refused_with_the_way_to_allow_it() -> None:
    running = config("a")
    assert renamed(running, capture("a")) is None
    assert renamed(None, capture("a", server="other")) is None  # a new connector
    problem = renamed(running, capture("a", server="other"))
    assert problem is not None and "--rename-source" in problem and "'shop'" in problem


def test_only_debezium_postgres_connectors_are_captures() -> None:
    found = captures({"a": config("a"), "mirror": {"connector.class": "x.Mirror"}, "gone": None})
    assert [c.name for c in found] == ["a"]
