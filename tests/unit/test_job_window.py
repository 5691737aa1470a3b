"""Which event-id window a job's inbox keeps, from its source and its settings (pure)."""

from __future__ import annotations

import pytest
from pydantic_settings import SettingsConfigDict

from inbox import DEFAULT_WINDOW, EXACTLY_ONCE_WINDOW
from spark_consumers.job import Job
from spark_consumers.settings import ConsumerSettings


class Settings(ConsumerSettings):
    model_config = SettingsConfigDict(env_prefix="WINDOWTEST_")


def job(**options: object) -> Job:
    return Job(
        name="j",
        topics=("outbox.event.order",),
        consumer="c",
        handlers={},
        database_url="postgresql+psycopg://c@127.0.0.1/c",
        bootstrap_servers="127.0.0.1:9092",
        **options,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("env", "window"),
    [
        ({}, DEFAULT_WINDOW),  # a topic of unknown origin: the at-least-once window
        ({"WINDOWTEST_EXACTLY_ONCE_SOURCE": "true"}, EXACTLY_ONCE_WINDOW),  # Debezium's resume
        ({"WINDOWTEST_EXACTLY_ONCE_SOURCE": "true", "WINDOWTEST_DEDUP_WINDOW": "0"}, 0),
        ({"WINDOWTEST_DEDUP_WINDOW": "1234"}, 1234),
    ],
)
def test_the_window_follows_the_source_unless_set(monkeypatch, env, window):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert job(**Settings().job_options()).dedup_window() == window
    assert job(**Settings().job_options()).inbox(engine=None).window == window  # type: ignore[arg-type]


def test_an_exactly_once_window_is_smaller_than_the_at_least_once_one():
    assert 0 < EXACTLY_ONCE_WINDOW < DEFAULT_WINDOW


def test_the_delayed_retry_policy_comes_from_the_settings(monkeypatch):
    from inbox import RetryPolicy

    assert job(**Settings().job_options()).inbox(engine=None).retry == RetryPolicy()  # type: ignore[arg-type]
    monkeypatch.setenv("WINDOWTEST_RETRY_ATTEMPTS", "2")
    monkeypatch.setenv("WINDOWTEST_RETRY_FIRST_SECONDS", "0.5")
    policy = job(**Settings().job_options()).inbox(engine=None).retry  # type: ignore[arg-type]
    assert (policy.attempts, policy.first, policy.factor) == (2, 0.5, RetryPolicy().factor)
