"""Who may publish what a consumer applies: per aggregate type, the sources (the source names
their connectors write on each record, `outboxkit.kernel.wire.SOURCE`) whose events of that
type the consumer takes. Routing follows the outbox row's ``aggregatetype`` column, which any
service's database role writes in its own outbox, and one Connect principal may write every
outbox topic: without this rule a service could put a ``PaymentCaptured`` on the payments
topic. A record of a listed type from another source, or from none, is parked with the reason
(nothing is lost: once the rule or the record is right, a redrive applies it); types not
listed are taken from any source."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from outboxkit.kernel.wire.record import Decoded, KafkaRecord, read


@dataclass(frozen=True)
class Publishers:
    """``allowed``: aggregate type -> the source names that may publish it (empty: any)."""

    allowed: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, allowed: Mapping[str, Collection[str]] | None) -> Publishers:
        """The rule from a job's setting.

        Args:
            allowed: Aggregate type -> the source names that may publish it; None: any.
        """
        return cls({kind: frozenset(names) for kind, names in (allowed or {}).items()})

    def refusal(self, decoded: Decoded) -> str | None:
        """Why ``decoded`` may not be applied, else None.

        Args:
            decoded: A record as read, its source name as the record says it (not yet keyed).
        """
        if not self.allowed or decoded.envelope is None:
            return None
        kind = decoded.envelope.aggregate_type
        names = self.allowed.get(kind)
        if names is None or decoded.source in names:
            return None
        allowed = ", ".join(sorted(names))
        if decoded.source is None:
            return (
                f"a {kind!r} event without a source name: only {allowed} may publish it, and "
                "this record does not say who did"
            )
        return f"source {decoded.source!r} may not publish {kind!r} events (only {allowed})"

    def read(self, record: KafkaRecord) -> Decoded:
        """``record`` decoded (never raising, `outboxkit.kernel.wire.record.read`), with the
        rule's refusal when it has one (`refusal`).

        Args:
            record: A record of one of the consumer's topics.
        """
        decoded = read(record)
        if not self.allowed:
            return decoded
        reason = self.refusal(decoded)
        return decoded if reason is None else decoded._replace(refused=reason)
