"""`outboxkit schemas export|check`: the event contracts' JSON Schemas, committed with the code,
and the compatibility check of the models against them (see `outbox.schemas`)."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from outboxkit.commands.errors import CommandError
from outboxkit.parsers import NO_SETTINGS, SubParsers, command, group

if TYPE_CHECKING:
    from outbox.contracts import Contracts

CONTRACTS_FORM = "module:attr naming an outbox.contracts.Contracts, e.g. myservice.events:CONTRACTS"


def load(spec: str) -> tuple[Contracts, Path]:
    """The `Contracts` named ``module:attribute``, and its default schema folder: ``schemas``
    beside the module."""
    from outbox.contracts import Contracts

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CommandError(f"bad contracts reference {spec!r}: expected {CONTRACTS_FORM}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(
            f"bad contracts reference {spec!r}: {exc}; expected {CONTRACTS_FORM}"
        ) from exc
    contracts = getattr(module, attribute, None)
    if not isinstance(contracts, Contracts):
        raise CommandError(
            f"bad contracts reference {spec!r}: {type(contracts).__name__}, not a Contracts; "
            f"expected {CONTRACTS_FORM}"
        )
    return contracts, Path(module.__file__ or ".").parent / "schemas"


def _export(args: argparse.Namespace, settings: None) -> int:
    from outbox.schemas import export

    contracts, default = load(args.contracts)
    folder: Path = args.dir or default
    written = export(contracts, folder)
    for path in written:
        print(f"wrote {path}")
    print(f"{len(contracts.models)} contracts, {len(written)} schema(s) written to {folder}")
    return 0


def _check(args: argparse.Namespace, settings: None) -> int:
    from outbox.schemas import check

    contracts, default = load(args.contracts)
    folder: Path = args.dir or default
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


def add_parser(sub: SubParsers) -> None:
    actions = group(
        sub,
        "schemas",
        help="event contracts: export their JSON Schemas, check compatibility with them",
    )
    export = command(
        actions,
        "export",
        _export,
        settings=NO_SETTINGS,
        help="write each contract's JSON Schema (per version) to the folder committed with the "
        "code",
    )
    check = command(
        actions,
        "check",
        _check,
        settings=NO_SETTINGS,
        help="check the models against their committed JSON Schemas; exits 1 when incompatible",
        description="Fail when a model changed in a way that breaks a deployed publisher or "
        "consumer (a removed or newly required field, a changed type, a narrowed enum, a "
        "tightened bound) without a raised version, or when a raised version has no upcaster "
        "from the one before.",
    )
    for parser in (export, check):
        parser.add_argument(
            "--contracts",
            required=True,
            metavar="MODULE:ATTR",
            help="the Contracts object, e.g. myservice.events:CONTRACTS",
        )
        parser.add_argument(
            "--dir", type=Path, help="the schema folder (default: schemas/ beside that module)"
        )
