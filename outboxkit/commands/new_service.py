"""`outboxkit new-service NAME [--dir PATH]`: a new service folder from the service template.

The template is package data (``outboxkit/templates/service``, files ending ``.tmpl``) in which
fixed tokens are replaced by the standard library (``str.replace``). The files differ from one
service to the next only by names (no loop, no condition), so a template engine such as Jinja2
would be a runtime dependency that buys nothing; the tokens (``__service__``, ``__Service__``,
``__SERVICE__``, ``__upstream__``...) are valid in Python names and paths, so a template file
reads as the code it becomes, and they cannot be mistaken for anything in real code (unlike
``$`` in a regular expression or ``{}`` in an f-string)."""

from __future__ import annotations

import argparse
import datetime
import keyword
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath

from outboxkit.settings import Settings

TEMPLATE = ("templates", "service")
SUFFIX = ".tmpl"
# Lower-case words joined by single underscores: it prefixes settings (NAME_*), whose nested
# delimiter is a double underscore, so no double or trailing one.
NAME = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
MAX_NAME = 30
# Names the service's package cannot take: it would shadow one the service imports.
TAKEN = frozenset(
    {
        "alembic",
        "cdc",
        "fastapi",
        "inbox",
        "migrations",
        "outbox",
        "outboxkit",
        "pydantic",
        "service_template",
        "spark_consumers",
        "sqlalchemy",
        "tests",
        "uvicorn",
    }
)
TOKEN = re.compile(r"__(?:service|Service|SERVICE|upstream|Upstream|UPSTREAM|date)__")


class NewServiceError(ValueError):
    """The service cannot be generated: a bad name, or its folder is not empty."""


def check_name(name: str, what: str = "service name") -> str:
    """``name`` if it can name a service (its package, database, role, topic), else an error."""
    if not NAME.fullmatch(name) or len(name) > MAX_NAME:
        raise NewServiceError(
            f"{what} {name!r}: use 1 to {MAX_NAME} lower-case letters and digits, words joined "
            "by single underscores, starting with a letter (e.g. billing, stock_2)"
        )
    if keyword.iskeyword(name) or name in TAKEN or name in sys.stdlib_module_names:
        raise NewServiceError(
            f"{what} {name!r} is a Python keyword or the name of a module the service imports: "
            "choose another"
        )
    return name


def pascal(name: str) -> str:
    """``stock_2`` -> ``Stock2``: the prefix of the service's event types."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


@dataclass(frozen=True)
class ServiceSpec:
    """What one generated service is called and whose events it consumes."""

    name: str
    upstream: str

    def tokens(self) -> Mapping[str, str]:
        """Each template token and what replaces it."""
        return {
            "__service__": self.name,
            "__Service__": pascal(self.name),
            "__SERVICE__": self.name.upper(),
            "__upstream__": self.upstream,
            "__Upstream__": pascal(self.upstream),
            "__UPSTREAM__": self.upstream.upper(),
            "__date__": datetime.date.today().isoformat(),
        }

    def render(self, text: str) -> str:
        """``text`` with every token replaced."""
        tokens = self.tokens()
        return TOKEN.sub(lambda m: tokens[m.group(0)], text)


def template_files(root: Traversable | None = None) -> Iterator[tuple[PurePosixPath, str]]:
    """Every template file (its path under the template, without ``.tmpl``) and its text."""
    root = root or resources.files("outboxkit").joinpath(*TEMPLATE)

    def walk(node: Traversable, path: PurePosixPath) -> Iterator[tuple[PurePosixPath, str]]:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir():
                yield from walk(child, path / child.name)
            elif child.name.endswith(SUFFIX):
                yield path / child.name[: -len(SUFFIX)], child.read_text(encoding="utf-8")

    yield from walk(root, PurePosixPath())


def generate(spec: ServiceSpec, parent: Path) -> Path:
    """Write the service's folder ``parent/<name>``; refuse (changing nothing) when it exists
    and is not empty. Returns the folder."""
    target = parent / spec.name
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise NewServiceError(
            f"{target} exists and is not empty: nothing was written (choose another --dir or "
            "name, or remove the folder)"
        )
    rendered = [(target / spec.render(str(p)), spec.render(t)) for p, t in template_files()]
    for path, text in rendered:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return target


def _new_service(args: argparse.Namespace, settings: Settings) -> int:
    try:
        spec = ServiceSpec(check_name(args.name), check_name(args.consumes, "--consumes"))
        if spec.upstream == spec.name:
            raise NewServiceError("--consumes names the service itself: name another service")
        target = generate(spec, args.dir)
    except NewServiceError as exc:
        print(f"outboxkit new-service: error: {exc}", file=sys.stderr)
        return 2
    print(f"created {target}: the {spec.name} service (see {target / 'README.md'})")
    print(f"next: cd {target} && pytest -m 'not integration'")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    new = sub.add_parser(
        "new-service",
        help="generate a new service folder from the service template",
        description="Write PATH/NAME: a service on outboxkit's service template (a FastAPI app "
        "whose POST /items publishes an event through the outbox in the item's transaction), "
        "its tables and Alembic chain, a Spark consumer job applying another service's event "
        "through a typed contract, unit and integration tests, a README. Refuses to write into "
        "a folder that is not empty (exit 2, nothing changed).",
    )
    new.add_argument(
        "name",
        metavar="NAME",
        help="the service's name: 1-30 lower-case letters and digits, words joined by single "
        "underscores, starting with a letter (e.g. billing); it names the package, database, "
        "settings prefix (NAME_*) and topic",
    )
    new.add_argument(
        "--dir",
        type=Path,
        default=Path("."),
        metavar="PATH",
        help="the folder to create NAME/ in (default: the current folder)",
    )
    new.add_argument(
        "--consumes",
        default="upstream",
        metavar="SERVICE",
        help="the service whose <Service>ItemCreated events the consumer job applies (a "
        "service generated by this command publishes them); same rules as NAME "
        "(default: upstream)",
    )
    new.set_defaults(run=_new_service)
