"""Connectors that must not run side by side: one source name for two databases, two
connectors on one outbox, a running connector's source renamed; compared by the database's
identity where the configs write it (one database under two host names, a database replaced
under a running connector), by host, port and name where they do not."""

from __future__ import annotations

from cdc.collisions import Capture, capture_of, captures, collisions, renamed, replaced, reused
from cdc.config import ConnectorSettings, build_connector_config

SHOP = "7313912482915830823/shop"  # the database's identity: system identifier/name
RESTORED = "7314000000000000001/shop"  # the same name in another cluster


def config(
    name: str,
    *,
    host: str = "db",
    database: str = "shop",
    server: str = "shop",
    identity: str | None = None,
    tables: tuple[str, ...] = ("public.outbox",),
    heartbeat: str | None = "public.outbox_heartbeat",
) -> dict:
    settings = ConnectorSettings(
        name,
        host,
        5432,
        database,
        "shop_cdc",
        server_name=server,
        source_identity=identity,
        outbox_tables=tables,
        heartbeat_table=heartbeat,
    )
    return build_connector_config(settings)


def capture(name: str, **kwargs: object) -> Capture:
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


def test_a_capture_carries_the_identity_its_config_writes() -> None:
    assert capture("a", identity=SHOP).identity == SHOP
    assert capture("a").identity is None
    assert "(identity 7313912482915830823/shop)" in capture("a", identity=SHOP).where()


def test_one_database_under_two_host_names_is_one_database() -> None:
    running = capture("a", host="localhost", identity=SHOP)
    (problem,) = collisions(
        capture("b", host="127.0.0.1", server="shop_b", identity=SHOP), [running]
    )
    assert "connector a already captures public.outbox" in problem
    assert "which b would capture again (through 127.0.0.1:5432)" in problem
    assert "delete one of them" in problem
    # without the identity, the two host names look like two databases
    assert collisions(capture("b", host="127.0.0.1", server="shop_b"), [capture("a")]) == []


def test_one_source_name_for_two_identities_is_refused_whatever_the_host() -> None:
    """The same host, port and name, but another cluster (a restore, a new initdb)."""
    (problem,) = collisions(capture("b", identity=RESTORED), [capture("a", identity=SHOP)])
    assert "connector a already uses the source name 'shop'" in problem
    assert f"(identity {SHOP})" in problem
    assert "give b a name of its own (OUTBOXKIT_SERVER_NAME)" in problem
    assert "two databases under one name" in problem


def test_one_source_name_for_two_connectors_on_one_database_is_refused() -> None:
    """Other tables, the same name: the two streams interleave their positions."""
    other_tables = capture("b", identity=SHOP, tables=("sales.outbox",), heartbeat=None)
    (problem,) = collisions(other_tables, [capture("a", identity=SHOP)])
    assert "already uses the source name 'shop'" in problem and "interleave" in problem


def test_connectors_of_their_own_on_one_database_run_side_by_side() -> None:
    own = capture("b", server="sales", identity=SHOP, tables=("sales.outbox",), heartbeat=None)
    assert collisions(own, [capture("a", identity=SHOP)]) == []
    # identities decide over host, port and name where both configs have one
    elsewhere = capture("b", host="db", database="shop", server="other", identity=RESTORED)
    assert collisions(elsewhere, [capture("a", identity=SHOP)]) == []


def test_a_connector_without_identity_is_compared_by_host_port_and_name() -> None:
    old = capture("a")  # applied before configs wrote the identity
    (problem,) = collisions(capture("b", server="shop_b", identity=SHOP), [old])
    assert "connector a already captures public.outbox" in problem
    assert collisions(capture("b", host="other", server="b", identity=SHOP), [old]) == []


def test_a_replaced_database_under_the_running_connector_is_refused_with_its_fix() -> None:
    running = config("a", identity=SHOP)
    problem = replaced(running, capture("a", identity=RESTORED))
    assert problem is not None
    assert f"captured the database {SHOP} as source 'shop'" in problem
    assert f"(identity {RESTORED}) is another one" in problem
    assert "OUTBOXKIT_SERVER_NAME" in problem and "--rename-source" in problem
    assert replaced(running, capture("a", identity=SHOP)) is None  # the same database
    assert replaced(running, capture("a", server="new", identity=RESTORED)) is None  # new source
    assert replaced(config("a"), capture("a", identity=RESTORED)) is None  # not known before
    assert replaced(None, capture("a", identity=RESTORED)) is None  # a new connector


def test_a_rename_back_to_a_name_with_stored_offsets_is_refused() -> None:
    running = {"topic.prefix": "shop_v2"}
    back = Capture("shop", "shop", ("db", "5432", "shop"), frozenset({"public.outbox"}))
    assert "stored offsets under the source name 'shop'" in (
        reused(running, back, ["shop", "shop_v2"]) or ""
    )
    assert reused(running, back, ["shop_v2"]) is None  # a name never used
    assert reused({"topic.prefix": "shop"}, back, ["shop"]) is None  # no rename
    assert reused(None, back, ["shop"]) is None  # a new connector
