"""`outboxkit schemas export|check`: the event contracts' JSON Schemas, committed with the code,
and the compatibility check of the models against them (see `outbox.schemas`)."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from outbox.contracts import Contracts
from outboxkit.settings import Settings

DEFAULT_CONTRACTS = "outboxkit.saga.contracts:CONTRACTS"


def load(spec: str) -> tuple[Contracts, Path]:
    """The `Contracts` named ``module:attribute``, and its default schema folder: ``schemas``
    beside the module."""
    module_name, _, attribute = spec.partition(":")
    if not attribute:
        raise ValueError(f"--contracts {spec!r}: write module:attribute")
    module = importlib.import_module(module_name)
    contracts = getattr(module, attribute, None)
    if not isinstance(contracts, Contracts):
        raise ValueError(f"{spec} is not an outbox.contracts.Contracts")
    return contracts, Path(module.__file__ or ".").parent / "schemas"


def run(args: argparse.Namespace, settings: Settings) -> int:
    from outbox.schemas import check, export

    contracts, default = load(args.contracts)
    folder: Path = args.dir or default
    if args.action == "export":
        written = export(contracts, folder)
        for path in written:
            print(f"wrote {path}")
        print(f"{len(contracts.models)} contracts, {len(written)} schema(s) written to {folder}")
        return 0
    report = check(contracts, folder)
    for note in report.notes:
        print(f"note: {note}")
    for problem in report.problems:
        print(f"incompatible: {problem}", file=sys.stderr)
    print(
        f"{len(contracts.models)} contracts checked against {folder}: "
        + ("compatible" if report.ok else f"{len(report.problems)} problem(s)")
    )
    return 0 if report.ok else 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schemas = sub.add_parser(
        "schemas",
        help="event contracts: export their JSON Schemas, check compatibility with them",
        description="export: write each contract's JSON Schema (per version) to the folder "
        "committed with the code. check: fail when a model changed in a way that breaks a "
        "deployed publisher or consumer (a removed or newly required field, a changed type, a "
        "narrowed enum, a tightened bound) without a raised version, or when a raised version "
        "has no upcaster from the one before.",
    )
    schemas.add_argument(
        "action",
        choices=("export", "check"),
        help="export: write the JSON Schemas; check: the models against them",
    )
    schemas.add_argument(
        "--contracts",
        default=DEFAULT_CONTRACTS,
        metavar="MODULE:ATTR",
        help=f"the Contracts object (default {DEFAULT_CONTRACTS})",
    )
    schemas.add_argument(
        "--dir", type=Path, help="the schema folder (default: schemas/ beside that module)"
    )
    schemas.set_defaults(run=run)
