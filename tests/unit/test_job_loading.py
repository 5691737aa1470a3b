"""`load_job` turns ``module:attr`` into a Job, or says why it cannot, in one line."""

from __future__ import annotations

import os

import pytest

from spark_consumers import Job, load_job


def test_a_factory_is_called_and_its_job_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYMENTS_DATABASE_URL", "postgresql+psycopg://payments@127.0.0.1/payments")
    monkeypatch.setenv("PAYMENTS_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    job = load_job("outboxkit_workshop.saga.jobs:payments")
    assert isinstance(job, Job)
    assert (job.name, job.consumer) == ("saga_payments", "payments")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("outboxkit_workshop.saga.jobs", "write it as module:attribute"),
        (
            "outboxkit_workshop.saga.nowhere:payments",
            "cannot be loaded: No module named 'outboxkit_workshop.saga.nowhere'",
        ),
        (
            "outboxkit_workshop.saga.jobs:nothing",
            "cannot be loaded: module 'outboxkit_workshop.saga.jobs' has no attribute 'nothing'",
        ),
        ("outboxkit_workshop.saga.jobs:ALL", "is a tuple, not a spark_consumers.Job"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_job(spec)


def test_missing_settings_are_named_not_dumped(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("PAYMENTS_")]:
        monkeypatch.delenv(name)
    with pytest.raises(ValueError) as caught:
        load_job("outboxkit_workshop.saga.jobs:payments")
    text = str(caught.value)
    assert text == (
        "job 'outboxkit_workshop.saga.jobs:payments' cannot be built from its settings (Settings): "
        "database_url: Field required"
    )
