"""What one job's inbox did with one Kafka partition's slice of a micro-batch: the typed row an
executor task sends back to the driver (as Arrow, the one format ``mapInArrow`` returns) and the
driver hands to ``on_batch`` callbacks, the console report and the metrics."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass, fields
from typing import Any

import pyarrow as pa

from inbox.decision import Action
from inbox.slice import BatchResult


@dataclass(frozen=True)
class SliceSummary:
    """One (job, Kafka partition) of a micro-batch.

    Attributes:
        job: The job's name.
        topic: The partition's topic.
        partition: The partition.
        watermark: The partition's watermark after the slice.
        applied: Records applied.
        skipped: Replays (at or below the watermark) and re-sends.
        parked: Parked, or held behind a parked record of their key.
        published: Events the handlers published, committed with the slice.
        retries: Retries of the slice while the database was unreachable.
        resent: Of the skipped: re-sends (a known event id at a new offset).
        seconds: Applying the slice, inbox transaction and retries included.
        handler_seconds: Of which in the handlers.
    """

    job: str
    topic: str
    partition: int
    watermark: int
    applied: int
    skipped: int
    parked: int
    published: int
    retries: int
    resent: int
    seconds: float
    handler_seconds: float

    @classmethod
    def of(
        cls,
        job: str,
        result: BatchResult,
        *,
        retries: int,
        seconds: float,
        handler_seconds: float,
    ) -> SliceSummary:
        """The summary of the inbox's ``result`` for ``job``.

        Args:
            job: The job's name.
            result: What the inbox did with the partition's slice.
            retries: Retries of the slice while the database was unreachable.
            seconds: Applying the slice, inbox transaction and retries included.
            handler_seconds: Of which in the handlers.
        """
        return cls(
            job=job,
            topic=result.topic,
            partition=result.partition,
            watermark=result.watermark,
            applied=result.count(Action.APPLY),
            skipped=result.count(Action.SKIP_REPLAY) + result.count(Action.SKIP_DUPLICATE),
            parked=result.count(Action.PARK) + result.count(Action.HOLD),
            published=len(result.published),
            retries=retries,
            resent=result.count(Action.SKIP_DUPLICATE),
            seconds=seconds,
            handler_seconds=handler_seconds,
        )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SliceSummary:
        """A summary from a result row (a Spark ``Row.asDict()``, an Arrow ``to_pylist`` item).

        Args:
            row: The row's values by column name, one per field.
        """
        return cls(**{f.name: _TYPES[f.name](row[f.name]) for f in fields(cls)})


_TYPES: dict[str, type] = {
    f.name: {"str": str, "int": int, "float": float}[str(f.type)] for f in fields(SliceSummary)
}
_ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64()}
ARROW_SCHEMA = pa.schema([(name, _ARROW[kind]) for name, kind in _TYPES.items()])
# The same columns as Spark declares them for mapInArrow's result.
SPARK_SCHEMA = ", ".join(
    f"{name} {({str: 'string', int: 'long', float: 'double'})[kind]}"
    for name, kind in _TYPES.items()
)


def to_arrow(summaries: Iterable[SliceSummary]) -> pa.RecordBatch:
    """The summaries as one Arrow record batch of `ARROW_SCHEMA`."""
    columns = list(zip(*(astuple(s) for s in summaries), strict=True)) or [()] * len(_TYPES)
    return pa.RecordBatch.from_arrays(
        [pa.array(list(c), type=t) for c, t in zip(columns, ARROW_SCHEMA.types, strict=True)],
        schema=ARROW_SCHEMA,
    )
