"""`outboxkit doctor [JOB...]`: everything the pipeline needs, checked where the settings say it
is (`outboxkit.doctor`), one line per finding with its fix."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from outboxkit.parsers import SubParsers, command

if TYPE_CHECKING:
    from outboxkit.settings import Settings

CHECKED = (
    "the database (reachable, migrated, wal_level, slots, senders, the CDC role and its grants), "
    "Kafka (reachable; with JOBs, their topics readable), Kafka Connect (reachable, Debezium and "
    "outboxkit's transform installed, the connector's config equal to what `cdc apply` puts, "
    "its database the one it was applied on, RUNNING), what `outboxkit consume` needs (a JDK, "
    "Spark's Kafka connector jars) and, with JOBs, their topics under the connector's topic "
    "prefix"
)


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    from outboxkit.commands.errors import PROBLEM, load_job
    from outboxkit.doctor import Examination, examine
    from outboxkit.endpoints import resolve

    sys.path.insert(0, os.getcwd())  # the jobs' modules, as `outboxkit consume` finds them
    jobs = [load_job(spec) for spec in args.jobs]
    findings = examine(Examination(settings, lambda: resolve(settings), jobs))
    if args.json:
        print(json.dumps([f.as_dict() for f in findings], indent=2))
    else:
        for finding in findings:
            print(finding.line())
    failed = sum(f.ok is False for f in findings)
    if not args.json:
        warned = sum(f.warning for f in findings)
        print(f"{len(findings)} checked, {failed} problem(s), {warned} warning(s)")
    return PROBLEM if failed else 0


def add_parser(sub: SubParsers) -> None:
    doctor = command(
        sub,
        "doctor",
        _doctor,
        help="check everything the pipeline needs; one line per problem with its fix",
        description=f"Check {CHECKED}. Exit 0 when nothing failed (warnings: what only "
        "`outboxkit consume` needs on this machine), 1 when a check failed.",
    )
    doctor.add_argument(
        "jobs", nargs="*", metavar="JOB", help="module:attr of a consumer Job to check as well"
    )
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")
