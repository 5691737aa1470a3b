"""`outboxkit new-service NAME [--dir PATH] [--consumes SERVICE ...] [--async]`: a new service
folder from the service template.

The template is package data (``outboxkit/templates/service``, files ending ``.tmpl``) in which
fixed tokens are replaced by the standard library. The tokens (``__service__``, ``__Service__``,
``__SERVICE__``, ``__upstream__``...) are valid in Python names and paths, so a template file
reads as the code it becomes, and they cannot be mistaken for anything in real code (unlike
``$`` in a regular expression or ``{}`` in an f-string). Line directives, each on a line of its
own, shape a file by the options: ``#> if consumes`` and ``#> if publishes only`` keep their
lines for a service that consumes (or does not), ``#> if async`` and ``#> if sync`` for a
service whose routes are ``async def`` (``--async``) or not, ``#> for upstream`` repeats its
lines once per consumed service (the ``__upstream__`` tokens are only valid there); ``#> end``
closes the innermost, and blocks nest. A file that renders empty is not written. That is all
the logic the files need, so a template engine such as Jinja2 would be a runtime dependency
that buys nothing."""

from __future__ import annotations

import argparse
import datetime
import keyword
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath

import outboxkit
from outboxkit.parsers import NO_SETTINGS, HelpFormatter, add_debug

TEMPLATE = ("templates", "service")
SUFFIX = ".tmpl"
# A template of a dot file is named dot.<name>.tmpl: package data globs skip hidden files.
DOT = "dot."
# Lower-case words joined by single underscores: it prefixes settings (NAME_*), whose nested
# delimiter is a double underscore, so no double or trailing one.
NAME = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
MAX_NAME = 30
# Names the service's package cannot take: it would shadow a module the service or its tools
# import (outboxkit's top-level packages, the import names of the distributions that
# outboxkit[service,spark] and the service's dev tools install), or a folder next to it.
TAKEN = frozenset(
    {
        *("cdc", "inbox", "migrations", "outbox", "outboxkit", "service_template"),
        *("spark_consumers", "alembic", "annotated_doc", "annotated_types", "anyio"),
        *("certifi", "charset_normalizer", "click", "confluent_kafka", "dateutil", "dotenv"),
        *("fastapi", "google", "greenlet", "h11", "httpcore", "httptools", "httpx", "idna"),
        *("iniconfig", "mako", "markdown_it", "markupsafe", "mdurl", "mypy", "mypyc"),
        *("mypy_extensions", "numpy", "opentelemetry", "packaging", "pandas", "pathspec"),
        *("pluggy", "prometheus_client", "psycopg", "psycopg_binary", "py4j", "pyarrow"),
        *("pydantic", "pydantic_core", "pydantic_settings", "pygments", "pyspark", "pytest"),
        *("pytz", "requests", "rich", "ruff", "setuptools", "sqlalchemy", "starlette"),
        *("tenacity", "typing_extensions", "typing_inspection", "tzdata", "urllib3"),
        *("uvicorn", "uvloop", "wheel", "ast_serialize", "librt", "py"),
        *("tests", "wheels", "checkpoints"),
    }
)
TOKEN = re.compile(
    r"__(?:service|Service|SERVICE|upstream|Upstream|UPSTREAM|date|requirement|extras|release)__"
)
UPSTREAM_TOKENS = ("__upstream__", "__Upstream__", "__UPSTREAM__")
DIRECTIVE = re.compile(r"#> (if consumes|if publishes only|if async|if sync|for upstream|end)")


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


def requirement(consumes: bool, release: str = outboxkit.__version__) -> str:
    """The service's outboxkit requirement: the extras it needs, compatible with ``release``
    (the version generating it; unpinned when run from a source tree never installed)."""
    extras = "service,spark" if consumes else "service"
    pinned = re.fullmatch(r"\d+\.\d+\.\d+", release)
    return f"outboxkit[{extras}]" + (f"~={release}" if pinned else "")


@dataclass(frozen=True)
class ServiceSpec:
    """What one generated service is called, whose events it consumes (none: it only
    publishes), and whether its routes are ``async def`` on an AsyncSession."""

    name: str
    upstreams: tuple[str, ...] = ()
    asynchronous: bool = False

    def check(self) -> ServiceSpec:
        """This spec if every name is valid and the event types they make are distinct."""
        check_name(self.name)
        for upstream in self.upstreams:
            check_name(upstream, "--consumes")
        if self.name in self.upstreams:
            raise NewServiceError("--consumes names the service itself: name another service")
        if len(set(self.upstreams)) != len(self.upstreams):
            raise NewServiceError("--consumes names a service twice: name each one once")
        prefixes: dict[str, str] = {}
        for name in (self.name, *self.upstreams):
            other = prefixes.setdefault(pascal(name), name)
            if other != name:
                raise NewServiceError(
                    f"--consumes: {other!r} and {name!r} give the same event type "
                    f"({pascal(name)}ItemCreated): rename one of them"
                )
        return self

    def tokens(self) -> Mapping[str, str]:
        """Each template token outside a ``#> for upstream`` block and what replaces it."""
        release = outboxkit.__version__
        return {
            "__service__": self.name,
            "__Service__": pascal(self.name),
            "__SERVICE__": self.name.upper(),
            "__date__": datetime.date.today().isoformat(),
            "__requirement__": requirement(bool(self.upstreams), release),
            "__extras__": "service,spark" if self.upstreams else "service",
            "__release__": release if "+" not in release else "<version>",
        }

    def render(self, text: str) -> str:
        """``text`` with its directives applied and every token replaced."""
        return "".join(self._expand(_parse(text), self.tokens()))

    def _expand(self, nodes: Sequence[Node], tokens: Mapping[str, str]) -> Iterator[str]:
        for node in nodes:
            if isinstance(node, str):
                yield TOKEN.sub(lambda m: _token(tokens, m.group(0)), node)
            elif node.directive == "for upstream":
                for upstream in self.upstreams:
                    values = (upstream, pascal(upstream), upstream.upper())
                    scoped = {**tokens, **dict(zip(UPSTREAM_TOKENS, values, strict=True))}
                    yield from self._expand(node.body, scoped)
            elif self._keeps(node.directive):
                yield from self._expand(node.body, tokens)

    def _keeps(self, directive: str) -> bool:
        """Whether an ``#> if`` directive keeps its lines for this service."""
        return {
            "if consumes": bool(self.upstreams),
            "if publishes only": not self.upstreams,
            "if async": self.asynchronous,
            "if sync": not self.asynchronous,
        }[directive]


@dataclass(frozen=True)
class Block:
    """Lines under one directive, up to its ``#> end``."""

    directive: str
    body: tuple[Node, ...]


Node = str | Block


def _token(tokens: Mapping[str, str], token: str) -> str:
    if token not in tokens:
        raise ValueError(f"template token {token} outside a '#> for upstream' block")
    return tokens[token]


def _parse(text: str) -> tuple[Node, ...]:
    """The template's lines and directive blocks, nested."""
    bodies: list[list[Node]] = [[]]
    open_: list[str] = []
    for line in text.splitlines(keepends=True):
        directive = DIRECTIVE.fullmatch(line.strip())
        if directive is None:
            bodies[-1].append(line)
        elif directive.group(1) != "end":
            open_.append(directive.group(1))
            bodies.append([])
        elif open_:
            body = bodies.pop()
            bodies[-1].append(Block(open_.pop(), tuple(body)))
        else:
            raise ValueError("template: '#> end' closes no directive")
    if open_:
        raise ValueError(f"template: '#> {open_[-1]}' is never closed by '#> end'")
    return tuple(bodies[0])


def template_files(root: Traversable | None = None) -> Iterator[tuple[PurePosixPath, str]]:
    """Every template file (its path under the template, without ``.tmpl``) and its text."""
    root = root or resources.files("outboxkit").joinpath(*TEMPLATE)

    def walk(node: Traversable, path: PurePosixPath) -> Iterator[tuple[PurePosixPath, str]]:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir():
                yield from walk(child, path / child.name)
            elif child.name.endswith(SUFFIX):
                name = child.name[: -len(SUFFIX)]
                name = "." + name[len(DOT) :] if name.startswith(DOT) else name
                yield path / name, child.read_text(encoding="utf-8")

    yield from walk(root, PurePosixPath())


def rendered(spec: ServiceSpec) -> dict[PurePosixPath, str]:
    """The service's files (path under its folder, text); a template rendering empty is left
    out."""
    files = {PurePosixPath(spec.render(str(p))): spec.render(t) for p, t in template_files()}
    return {path: text for path, text in files.items() if text.strip()}


def generate(spec: ServiceSpec, parent: Path) -> Path:
    """Write the service's folder ``parent/<name>``; refuse (changing nothing) when it exists
    and is not empty. Returns the folder."""
    target = parent / spec.name
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise NewServiceError(
            f"{target} exists and is not empty: nothing was written (choose another --dir or "
            "name, or remove the folder)"
        )
    for path, text in rendered(spec.check()).items():
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_text(text, encoding="utf-8")
    return target


def _new_service(args: argparse.Namespace, settings: None) -> int:
    try:
        spec = ServiceSpec(args.name, tuple(args.consumes or ()), args.asynchronous).check()
        target = generate(spec, args.dir)
    except NewServiceError as exc:
        print(f"outboxkit new-service: error: {exc}", file=sys.stderr)
        return 2
    kind = "async service" if spec.asynchronous else "service"
    print(f"created {target}: the {spec.name} {kind} (see {target / 'README.md'})")
    print(f"next: cd {target} && pip install -e '.[dev]' && pytest -m 'not integration'")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    new = sub.add_parser(
        "new-service",
        formatter_class=HelpFormatter,
        help="generate a new service folder from the service template",
        description="Write PATH/NAME: a service on outboxkit's service template (a FastAPI app "
        "whose POST /items publishes an event through the outbox in the item's transaction), "
        "its tables and Alembic chain (alembic.ini), with --consumes a Spark consumer job "
        "applying other services' events through typed contracts, unit and integration tests, "
        "a Dockerfile and a README. With --async its routes are async def on an AsyncSession. "
        "Refuses to write into a folder that is not empty (exit 2, nothing changed).",
    )
    add_debug(new)
    new.add_argument(
        "name",
        metavar="NAME",
        help=f"the service's name: 1-{MAX_NAME} lower-case letters and digits, words joined by "
        "single underscores, starting with a letter (e.g. billing); it names the package, "
        "database, settings prefix (NAME_*) and topic",
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
        action="append",
        metavar="SERVICE",
        help="a service whose <Service>ItemCreated events the consumer job applies (a service "
        "generated by this command publishes them); repeat it for several; same rules as NAME "
        "(default: none, the service only publishes and has no consumer job)",
    )
    new.add_argument(
        "--async",
        dest="asynchronous",
        action="store_true",
        help="make the routes async def on async_service_router: an AsyncUnitOfWork on an "
        "AsyncSession (psycopg's async driver, from the same database URL), awaited statements "
        "and publishes, idempotent_async; the consumer job's handlers stay synchronous, as they "
        "run in Spark's executors (default: synchronous routes on a Session)",
    )
    new.set_defaults(run=_new_service, settings=NO_SETTINGS)  # a bad setting cannot stop it
