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
    from outboxkit_workshop.devstack.settings import StackSettings

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
    from outboxkit_workshop.devstack.settings import StackSettings

    monkeypatch.setenv("OUTBOXKIT_MESSAGE_PREFIX", "")
    assert StackSettings().message_prefix is None
    monkeypatch.setenv("OUTBOXKIT_MESSAGE_PREFIX", "events")
    assert StackSettings().message_prefix == "events"
    monkeypatch.delenv("OUTBOXKIT_MESSAGE_PREFIX")
    assert StackSettings().message_prefix == "outbox"


def test_the_topic_prefix_is_one_field_read_under_each_class_prefix(monkeypatch):
    from pydantic_settings import SettingsConfigDict

    from outboxkit.kernel.wire.record import TopicPrefixSettings
    from outboxkit_workshop.devstack.settings import StackSettings
    from spark_consumers.settings import ConsumerSettings

    class Orders(ConsumerSettings):
        model_config = SettingsConfigDict(env_prefix="ORDERS_")

    monkeypatch.setenv("OUTBOXKIT_TOPIC_PREFIX", "events.")
    monkeypatch.setenv("ORDERS_TOPIC_PREFIX", "orders.")
    assert StackSettings(_env_file=None).topic_prefix == "events."
    assert Orders().topics("order") == ("orders.order",)
    field = TopicPrefixSettings.model_fields["topic_prefix"]
    for settings in (StackSettings, ConsumerSettings):
        inherited = settings.model_fields["topic_prefix"]
        assert (inherited.default, inherited.description) == (field.default, field.description)


@pytest.mark.parametrize("prefix", ["a b.", "p" * 50])
def test_a_topic_prefix_kafka_would_refuse_fails_at_start(monkeypatch, prefix):
    from outboxkit_workshop.devstack.settings import StackSettings

    monkeypatch.setenv("OUTBOXKIT_TOPIC_PREFIX", prefix)
    with pytest.raises(ValidationError, match="topic prefix"):
        StackSettings(_env_file=None)
