import pytest
from pydantic import ValidationError

from outbox.publish import Outbox
from outboxkit.settings import Settings


def test_environment_overrides_with_prefix(monkeypatch):
    monkeypatch.setenv("OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS", "kafka-1:9092")
    monkeypatch.setenv("OUTBOXKIT_SLOT_NAME", "orders_slot")
    s = Settings()
    assert s.kafka_bootstrap_servers == "kafka-1:9092"
    assert s.slot_name == "orders_slot"
    assert s.database_url is None  # unset means embedded


def test_defaults_are_embedded_with_exactly_once_connect():
    from devstack.settings import StackSettings

    s = StackSettings(_env_file=None)
    assert (s.database_url, s.connect_url) == (None, None)
    assert s.connect_exactly_once is True
    assert s.topic_prefix == "outbox.event."


@pytest.mark.parametrize("name", ["Bad", "has-dash", "x" * 64])
def test_slot_names_must_be_postgres_identifiers(name):
    with pytest.raises(ValidationError, match="lower-case"):
        Settings(slot_name=name)


def test_outbox_mode_is_checked():
    with pytest.raises(ValueError, match="one of delete, retain, message, not 'keep'"):
        Outbox(mode="keep")


def test_an_empty_message_prefix_captures_no_messages(monkeypatch):
    from devstack.settings import StackSettings

    monkeypatch.setenv("OUTBOXKIT_MESSAGE_PREFIX", "")
    assert StackSettings().message_prefix is None
    monkeypatch.setenv("OUTBOXKIT_MESSAGE_PREFIX", "events")
    assert StackSettings().message_prefix == "events"
    monkeypatch.delenv("OUTBOXKIT_MESSAGE_PREFIX")
    assert StackSettings().message_prefix == "outbox"
