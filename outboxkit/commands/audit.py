"""`outboxkit audit JOB...`: every event on consumer jobs' topics, applied, duplicate, parked,
pending or lost."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from outboxkit.parsers import SubParsers, command

if TYPE_CHECKING:
    from outboxkit.settings import Settings


def _audit(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    from outboxkit.commands.errors import load_job
    from spark_consumers.audit import CATEGORIES, audit

    results = []
    for spec in args.jobs:
        job = load_job(spec)
        engine = job.engine("once")
        try:
            with engine.connect() as conn:
                results.append(audit(job, conn))
        finally:
            engine.dispose()
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        console = Console()
        for result in results:
            verdict = (
                "OK: nothing lost, nothing applied twice"
                if result.ok
                else "LOST OR DUPLICATE EVENTS"
                if result.exact
                else "no ledger: lost and duplicate cannot be counted (Job.ledger)"
            )
            table = Table(title=f"audit {result.consumer}: {verdict}")
            for column in ("topic", "partition", "watermark", "end", "events", *CATEGORIES):
                table.add_column(column, justify="left" if column == "topic" else "right")
            for p in result.partitions:
                table.add_row(
                    p.topic,
                    str(p.partition),
                    str(p.watermark),
                    str(p.end),
                    str(p.events),
                    *(str(p.counts[c]) for c in CATEGORIES),
                )
            table.add_row(
                "total",
                "",
                "",
                "",
                str(sum(p.events for p in result.partitions)),
                *(str(result.total(c)) for c in CATEGORIES),
            )
            console.print(table)
            for p in result.partitions:
                for category, examples in p.examples.items():
                    if examples:
                        print(f"  {category} on {p.topic}[{p.partition}]: {', '.join(examples)}")
                for event_id, offsets in p.applied_at.items():
                    print(f"  {event_id} applied at offsets {offsets}")
            if result.ledger_only:
                print(f"  {result.ledger_only} applied event ids are no longer on the topics")
    # Lost or doubled events, or a job without a ledger (nothing proven): a problem found.
    return 0 if all(r.exact and r.ok for r in results) else 1


def add_parser(sub: SubParsers) -> None:
    audit = command(
        sub,
        "audit",
        _audit,
        help="every event on consumer jobs' topics: applied, duplicate, parked, pending, lost",
        description="every event on consumer jobs' topics: applied, duplicate, parked, pending, "
        "lost. Exits 1 when an event is lost or applied twice, or when a job has no ledger "
        "(Job.ledger), so that neither can be counted.",
    )
    audit.add_argument("jobs", nargs="+", metavar="JOB", help="module:attr of a Job")
    audit.add_argument("--json", action="store_true", help="print the results as JSON")
