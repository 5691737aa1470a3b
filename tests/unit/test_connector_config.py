import re
from pathlib import Path

import pytest

from cdc.config import (
    ConnectorConfigError,
    ConnectorSettings,
    build_connector_config,
    outbox_topic_pattern,
    source_identity_of,
    topic_for,
)
from cdc.connect import parse_status
from cdc.plugins import required_classes
from cdc.settings import CdcSettings, connector_config
from outboxkit.kernel.wire import SOURCE, SOURCE_IDENTITY, SOURCE_POSITION

IDENTITY = "7313912482915830823/orders"


def settings(**overrides):
    fields = dict(
        name="c",
        database_host="db",
        database_port=5432,
        database_name="orders",
        database_user="u",
        database_password="p",
    )
    fields.update(overrides)
    return ConnectorSettings(**fields)


def test_config_routes_by_aggregate_type_with_key_and_headers():
    config = build_connector_config(settings())
    assert config["connector.class"] == "io.debezium.connector.postgresql.PostgresConnector"
    assert config["plugin.name"] == "pgoutput"
    assert config["transforms.outbox.type"] == "io.debezium.transforms.outbox.EventRouter"
    assert config["transforms.outbox.route.by.field"] == "aggregatetype"
    assert config["transforms.outbox.route.topic.replacement"] == "outbox.event.${routedByValue}"
    assert config["transforms.outbox.table.field.event.key"] == "aggregateid"
    placement = config["transforms.outbox.table.fields.additional.placement"]
    for pair in (
        "type:header:eventType",
        "aggregatetype:header:aggregateType",
        "traceparent:header:traceparent",
    ):
        assert pair in placement
    assert config["key.converter"].endswith("StringConverter")
    assert config["value.converter"].endswith("StringConverter")  # payload JSON text as stored
    assert config["database.dbname"] == "orders" and config["database.port"] == "5432"
    assert all(isinstance(v, str) for v in config.values())


def test_source_and_position_headers_are_copied_before_the_router():
    """outboxkit's transform (cdc/java/smt) copies source.name and source.sequence
    into the headers the inbox reads, on the outbox records only, before EventRouter drops the
    change event's source block."""
    for message_prefix in (None, "outbox.v1"):
        config = build_connector_config(settings(message_prefix=message_prefix))
        steps = config["transforms"].split(",")
        assert steps.index("position") == steps.index("outbox") - 1
        assert config["transforms.position.type"] == "io.outboxkit.connect.SourcePositionHeaders"
        assert config["transforms.position.name.header"] == SOURCE == "sourceName"
        assert config["transforms.position.position.header"] == SOURCE_POSITION
        assert config["transforms.position.predicate"] == "isOutboxTable"
        assert "transforms.position.fields" not in config  # HeaderFrom's: top level only


def test_the_transform_is_built_from_the_projects_own_java_source():
    """The class the config names is the one cdc/java/smt compiles and registers for
    Connect's service loading (plugin.discovery=service_load)."""
    smt = Path(__file__).resolve().parents[2] / "cdc/java/smt/src/main"
    name = build_connector_config(settings())["transforms.position.type"]
    source = smt / "java" / (name.replace(".", "/") + ".java")
    assert "implements Transformation<R>" in source.read_text()
    services = smt / "resources/META-INF/services"
    registered = (services / "org.apache.kafka.connect.transforms.Transformation").read_text()
    assert name in registered.split()


def test_heartbeat_moves_an_idle_slot_and_only_inserts_are_emitted():
    config = build_connector_config(settings(heartbeat_interval_ms=5000))
    assert config["heartbeat.interval.ms"] == "5000"
    assert "public.outbox_heartbeat" in config["heartbeat.action.query"]
    assert config["table.include.list"] == "public.outbox,public.outbox_heartbeat"
    assert config["skipped.operations"] == "u,d,t"
    no_beat = build_connector_config(settings(heartbeat_interval_ms=0))
    assert "heartbeat.interval.ms" not in no_beat
    assert no_beat["table.include.list"] == "public.outbox"


def test_event_router_applies_only_to_outbox_tables():
    s = settings(outbox_tables=("public.outbox", "sales.outbox"), server_name="svc")
    pattern = re.compile(outbox_topic_pattern(s))
    assert pattern.match("svc.public.outbox") and pattern.match("svc.sales.outbox")
    assert not pattern.match("__debezium-heartbeat.svc")
    assert not pattern.match("svc.public.outbox_heartbeat")
    assert build_connector_config(s)["predicates.isOutboxTable.pattern"] == pattern.pattern


def test_messages_of_the_prefix_are_decoded_then_routed_like_outbox_rows():
    s = settings(server_name="svc", message_prefix="outbox.v1")
    config = build_connector_config(s)
    assert config["message.prefix.include.list"] == r"outbox\.v1"  # a regex: the dot escaped
    # decode first, then the same position headers and EventRouter as for a row
    assert config["transforms"] == "decode,position,outbox"
    assert config["transforms.decode.type"].endswith("DecodeLogicalDecodingMessageContent")
    assert config["transforms.decode.fields.null.include"] == "true"  # NULL headers kept
    decode_only = re.compile(config["predicates.isMessage.pattern"])
    assert decode_only.match("svc.message") and not decode_only.match("svc.public.outbox")
    route = re.compile(config["predicates.isOutboxTable.pattern"])
    assert route.match("svc.message") and route.match("svc.public.outbox")
    assert not route.match("svc.messages") and not route.match("svc.public.outbox_heartbeat")
    assert set(config["predicates"].split(",")) == {"isOutboxTable", "isMessage"}


def test_without_a_message_prefix_no_message_is_captured():
    config = build_connector_config(settings(message_prefix=None))
    assert config["message.prefix.exclude.list"] == ".*"
    assert config["transforms"] == "position,outbox" and "transforms.decode.type" not in config
    assert not re.compile(config["predicates.isOutboxTable.pattern"]).match("outboxkit.message")


def test_expand_mode_keeps_json_nulls():
    config = build_connector_config(settings(payload_encoding="expand"))
    assert config["transforms.outbox.table.expand.json.payload"] == "true"
    assert config["transforms.outbox.table.json.payload.null.behavior"] == "optional_bytes"
    assert config["value.converter"].endswith("JsonConverter")


def test_extra_settings_override_and_custom_prefix():
    config = build_connector_config(
        settings(topic_prefix="events.", extra={"tasks.max": "1", "snapshot.mode": "initial"})
    )
    assert config["snapshot.mode"] == "initial"
    assert topic_for("order", topic_prefix="events.") == "events.order"
    assert config["transforms.outbox.route.topic.replacement"].startswith("events.")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"outbox_tables": ()}, "at least one"),
        ({"outbox_tables": ("outbox",)}, "schema.table"),
        ({"slot_name": "Bad-Slot"}, "slot name"),
        ({"heartbeat_interval_ms": -1}, "heartbeat"),
        ({"topic_prefix": "a b"}, "topic prefix"),
        ({"payload_encoding": "avro"}, "payload_encoding"),
        ({"source_identity": "orders"}, "system_identifier"),
        ({"source_identity": "7313912482915830823/"}, "system_identifier"),
        ({"source_identity": "1/${file:/x:y}"}, "without"),  # a config-provider reference
    ],
)
def test_invalid_settings_are_rejected(overrides, message):
    with pytest.raises(ConnectorConfigError, match=message):
        build_connector_config(settings(**overrides))


def test_failed_task_trace_surfaces_in_status():
    status = parse_status(
        {
            "name": "c",
            "connector": {"state": "RUNNING"},
            "tasks": [{"id": 0, "state": "FAILED", "trace": "PSQLException: slot in use"}],
        }
    )
    assert not status.running
    assert "slot in use" in (status.failure or "")
    ok = parse_status(
        {"name": "c", "connector": {"state": "RUNNING"}, "tasks": [{"id": 0, "state": "RUNNING"}]}
    )
    assert ok.running and ok.failure is None
    assert not parse_status({"name": "c", "connector": {"state": "RUNNING"}, "tasks": []}).running


def test_a_topic_prefix_that_leaves_no_room_for_aggregate_types_is_refused():
    from outboxkit.kernel.wire.record import MAX_TOPIC_PREFIX_LENGTH

    with pytest.raises(ConnectorConfigError, match="Kafka's 249"):
        build_connector_config(settings(topic_prefix="p" * (MAX_TOPIC_PREFIX_LENGTH + 1)))
    assert build_connector_config(settings(topic_prefix="p" * MAX_TOPIC_PREFIX_LENGTH))


def test_the_database_identity_is_inserted_last_on_every_record():
    """Kafka's own InsertHeader, after the router and without a predicate (the predicates match
    the raw topics' names, gone once routed): every record carries the identity."""
    for overrides in ({}, {"message_prefix": None}, {"payload_encoding": "expand"}):
        config = build_connector_config(settings(source_identity=IDENTITY, **overrides))
        steps = config["transforms"].split(",")
        assert steps[-1] == "identity" and steps[-2] == "outbox", steps
        assert config["transforms.identity.type"] == (
            "org.apache.kafka.connect.transforms.InsertHeader"
        )
        assert config["transforms.identity.header"] == SOURCE_IDENTITY == "sourceIdentity"
        assert config["transforms.identity.value.literal"] == IDENTITY
        assert "transforms.identity.predicate" not in config
        assert source_identity_of(config) == IDENTITY
        assert "org.apache.kafka.connect.transforms.InsertHeader" in required_classes(config)


def test_without_an_identity_no_header_is_inserted():
    config = build_connector_config(settings())
    assert "identity" not in config["transforms"].split(",")
    assert not any(key.startswith("transforms.identity.") for key in config)
    assert source_identity_of(config) is None
    # a step that is not in the chain writes nothing
    listed = build_connector_config(settings(source_identity=IDENTITY))
    assert source_identity_of({**listed, "transforms": "position,outbox"}) is None


def test_cdc_apply_s_builder_takes_the_identity_it_read():
    cdc = CdcSettings(  # type: ignore[call-arg]
        _env_file=None,
        database_url="postgresql+psycopg://admin@localhost/orders",
        cdc_password_reference="${file:/secrets/cdc.properties:password}",
    )
    assert source_identity_of(connector_config(cdc, identity=IDENTITY)) == IDENTITY
    assert source_identity_of(connector_config(cdc)) is None
