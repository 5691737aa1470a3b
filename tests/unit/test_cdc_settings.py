"""The outbox connector built from the operator's settings (`cdc.settings`): the database as
Connect reaches it, the CDC role's password only as a reference or masked, and the dev stack
building its connector the same way."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from cdc.config import ConnectorConfigError, build_connector_config
from cdc.settings import CdcSettings, connector_password, connector_settings, masked

REFERENCE = "${file:/opt/kafka/secrets/cdc.properties:password}"


def settings(**values: object) -> CdcSettings:
    return CdcSettings(_env_file=None, **values)  # type: ignore[call-arg]


def test_the_database_as_connect_reaches_it() -> None:
    cs = connector_settings(
        settings(
            database_url="postgresql+psycopg://admin@db.internal:6432/shop",
            connect_database_host="postgres",
            cdc_password_reference=REFERENCE,
        )
    )
    assert (cs.database_host, cs.database_port, cs.database_name) == ("postgres", 6432, "shop")
    assert cs.database_user == "outboxkit_cdc"
    assert cs.database_password == REFERENCE
    assert cs.publication_autocreate == "disabled"  # `cdc prepare` creates it


def test_a_resolved_url_wins_over_none() -> None:
    cs = connector_settings(settings(), "postgresql+psycopg://x@127.0.0.1:5999/orders")
    assert (cs.database_host, cs.database_port, cs.database_name) == ("127.0.0.1", 5999, "orders")


def test_no_database_is_an_error_that_says_what_to_set() -> None:
    with pytest.raises(ConnectorConfigError, match="OUTBOXKIT_DATABASE_URL"):
        connector_settings(settings())


def test_every_setting_reaches_the_config() -> None:
    config = build_connector_config(
        connector_settings(
            settings(
                database_url="postgresql+psycopg://a@h/shop",
                server_name="shop",
                topic_prefix="shop.event.",
                outbox_tables=["app.outbox"],
                heartbeat_table="",
                connect_exactly_once=False,
                message_prefix="",
                connector_name="shop-outbox",
                slot_name="shop_slot",
            )
        )
    )
    assert config["topic.prefix"] == "shop"
    assert config["table.include.list"] == "app.outbox"
    assert config["transforms.outbox.route.topic.replacement"] == "shop.event.${routedByValue}"
    assert config["slot.name"] == "shop_slot"
    assert "exactly.once.support" not in config
    assert config["message.prefix.exclude.list"] == ".*"
    assert "heartbeat.action.query" not in config


def test_a_clear_password_is_refused_as_a_reference_and_not_echoed() -> None:
    with pytest.raises(ValidationError) as failed:
        settings(cdc_password_reference="hunter2")
    assert "hunter2" not in str(failed.value).replace("input_value='hunter2'", "")


def test_the_password_from_a_file_is_masked_when_printed(tmp_path: Path) -> None:
    secret = tmp_path / "cdc.password"
    secret.write_text("s3cret\n")
    values = settings(cdc_password_file=secret)
    assert connector_password(values) == "s3cret"
    config = {"database.password": "s3cret", "database.user": "outboxkit_cdc"}
    assert masked(config) == {"database.password": "********", "database.user": "outboxkit_cdc"}
    assert masked({"database.password": REFERENCE}) == {"database.password": REFERENCE}


def test_no_password_says_what_to_set() -> None:
    with pytest.raises(ConnectorConfigError, match="OUTBOXKIT_CDC_PASSWORD_REFERENCE"):
        connector_password(settings())


def test_tables_must_be_qualified() -> None:
    with pytest.raises(ValidationError, match=r"schema\.table"):
        settings(outbox_tables=["outbox"])


def test_the_dev_stack_builds_its_connector_with_the_same_function(tmp_path: Path) -> None:
    from outboxkit_workshop.devstack.connectors import connector_settings as stack_connector
    from outboxkit_workshop.devstack.settings import StackSettings

    class View:
        settings = StackSettings(_env_file=None, stack_dir=tmp_path, server_name="dev")  # type: ignore[call-arg]
        dir = tmp_path

        class secrets:
            dir = tmp_path / "secrets"

            @staticmethod
            def file(role: str) -> Path:
                return tmp_path / "secrets" / f"{role}.password"

    url = "postgresql+psycopg://postgres@127.0.0.1:5433/outboxkit"
    cs = stack_connector(View(), url)  # type: ignore[arg-type]
    assert cs.server_name == "dev"
    assert cs.database_password.startswith("${dir:")
    assert cs == replace(
        connector_settings(View.settings, url), database_password=cs.database_password
    )
