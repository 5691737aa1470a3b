"""What a service's consumer jobs read and how, composed into the service's settings."""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings

from inbox.apply import DEFAULT_MAX_ATTEMPTS, DEFAULT_WINDOW, EXACTLY_ONCE_WINDOW
from inbox.retries import RetryPolicy
from outboxkit.kernel.wire.record import TopicPrefixSettings, topic_for
from spark_consumers.job import DEFAULT_MAX_OFFSETS_PER_TRIGGER
from spark_consumers.retry import BATCH_RETRY


class ConsumerSettings(TopicPrefixSettings, BaseSettings):
    """Consumer settings of a service (mix into its settings class, which sets the env prefix)."""

    exactly_once_source: bool = Field(
        default=False,
        description="true when the topics are written by an exactly-once Connect worker "
        "(KIP-618): only Debezium's own re-sends on resuming remain, so a small event-id "
        "window is kept",
    )
    dedup_window: int | None = Field(
        default=None,
        ge=0,
        description="offsets per partition of applied event ids kept against re-sends "
        f"(unset: {EXACTLY_ONCE_WINDOW:,} for exactly-once sources, else the inbox's default "
        f"of {DEFAULT_WINDOW:,}; 0: none, the watermark alone)",
    )
    max_offsets_per_trigger: int = Field(
        default=DEFAULT_MAX_OFFSETS_PER_TRIGGER,
        gt=0,
        description="most Kafka records a micro-batch reads (Spark's maxOffsetsPerTrigger)",
    )
    max_handler_attempts: int = Field(
        default=DEFAULT_MAX_ATTEMPTS,
        ge=1,
        description="attempts of a failing handler on a record before the record is parked",
    )
    batch_retry_seconds: float = Field(
        default=BATCH_RETRY.budget,
        ge=0,
        description="seconds a batch is retried while the database is unreachable before its "
        "query fails (the runner then restarts the query from its checkpoint)",
    )

    retry_attempts: int = Field(
        default=RetryPolicy.attempts,
        ge=0,
        description="delayed retries of a record whose handler failed for a passing reason, "
        "before it is parked for a person; 0: none (inbox.RetryPolicy)",
    )
    retry_first_seconds: float = Field(
        default=RetryPolicy.first, ge=0, description="seconds before the first delayed retry"
    )
    retry_factor: float = Field(
        default=RetryPolicy.factor, ge=1, description="each delayed retry's delay, times this"
    )
    retry_cap_seconds: float = Field(
        default=RetryPolicy.cap, ge=0, description="the longest delay between delayed retries"
    )
    ledger: bool = Field(
        default=False,
        description="append every applied event to the inbox ledger, for `outboxkit audit` "
        "(off by default: the ledger grows with the message count)",
    )

    def topics(self, *aggregate_types: str) -> tuple[str, ...]:
        """The topics carrying the events of ``aggregate_types``."""
        return tuple(topic_for(t, topic_prefix=self.topic_prefix) for t in aggregate_types)

    publishers: dict[str, list[str]] = Field(
        default_factory=dict,
        description="who may publish each aggregate type the job reads, as JSON: aggregate "
        "type -> the source names (the producing connectors' server names) whose events of "
        "that type are applied; a record of another source is parked with the reason (unset: "
        'any source), e.g. {"payment": ["outboxkit_payments"]}',
    )

    def job_options(self) -> dict[str, Any]:
        """The `Job` fields these settings decide."""
        return {
            "exactly_once_source": self.exactly_once_source,
            "window": self.dedup_window,
            "max_offsets_per_trigger": self.max_offsets_per_trigger,
            "max_attempts": self.max_handler_attempts,
            "batch_retry_seconds": self.batch_retry_seconds,
            "ledger": self.ledger,
            "publishers": self.publishers,
            "settings_prefix": self.model_config.get("env_prefix") or None,
            "retry": RetryPolicy(
                attempts=self.retry_attempts,
                first=self.retry_first_seconds,
                factor=self.retry_factor,
                cap=self.retry_cap_seconds,
            ),
        }
