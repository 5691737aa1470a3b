"""`outboxkit cdc plugin`: outboxkit's Connect transform, which the outbox connector needs on
every Kafka Connect worker, installed from the jar this installation ships (`cdc.transform`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from outboxkit.parsers import NO_SETTINGS, SubParsers, command


def _plugin(args: argparse.Namespace, settings: Any) -> int:
    from cdc import transform

    shipped = transform.shipped()
    report: dict[str, Any] = {
        "jar": str(shipped.jar),
        "version": shipped.version,
        "sha256": shipped.sha256,
    }
    if args.into is not None:
        dest = transform.target(args.into, shipped)
        report["target"] = str(dest)
        if args.dry_run:  # what the real run would do, its refusal included
            report["action"] = transform.plan(args.into, shipped)
        else:
            report["action"] = "installed" if transform.install(args.into, shipped) else "unchanged"
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"transform {shipped.version}: {shipped.jar} (sha256 {shipped.sha256})")
    if args.into is not None:
        print(f"{report['action']}: {report['target']}")
        if not args.dry_run:
            print(
                f"restart the Connect workers whose plugin.path holds {args.into}, then run "
                "`outboxkit cdc apply`"
            )
    return 0


def add_parsers(actions: SubParsers) -> None:
    """Add `plugin` to the `cdc` group's sub-commands."""
    plugin = command(
        actions,
        "plugin",
        _plugin,
        help="install outboxkit's Connect transform onto a worker's plugin path",
        description="Copy the Connect transform this installation ships "
        "(io.outboxkit.connect.SourcePositionHeaders, its SHA-256 checked) into DIR/"
        "outboxkit-transform/, DIR a directory of the Kafka Connect workers' plugin.path; "
        "without --into, show the jar and its checksum. Safe to repeat; restart the workers "
        "afterwards. Every worker of the Connect cluster needs it.",
        settings=NO_SETTINGS,
    )
    plugin.add_argument(
        "--into", type=Path, metavar="DIR", help="a directory of the workers' plugin.path"
    )
    plugin.add_argument(
        "--dry-run", action="store_true", help="show where it would go; change nothing"
    )
    plugin.add_argument("--json", action="store_true", help="print the result as JSON")
