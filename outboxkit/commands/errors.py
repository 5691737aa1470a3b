"""The `outboxkit` command's exit codes, and the usual mistakes as one line that says the fix:
an unreachable database, Kafka Connect or Kafka, a bad setting, a bad job reference, a database
without the framework's tables. Anything else keeps its traceback (a bug to report).

Light at import: the libraries whose exceptions are recognised are imported only to classify one
that was raised."""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

OK, PROBLEM, USAGE, UNREACHABLE, INTERRUPTED = 0, 1, 2, 3, 130
EXIT_CODES = {
    OK: "success",
    PROBLEM: "the command ran and found a problem (a failed check, records still parked)",
    USAGE: "usage error or bad input (an unknown option, a bad OUTBOXKIT_* setting, a job "
    "reference that does not load)",
    UNREACHABLE: "an endpoint is unreachable (database, Kafka, Kafka Connect) or the database "
    "lacks the framework's tables",
    INTERRUPTED: "interrupted (Ctrl-C)",
}
JOB_FORM = "module:attr naming a spark_consumers.Job (or a function returning one)"
# The framework's packages: a frame in one of them is not the user's code.
FRAMEWORK = (
    "outboxkit",
    "cdc",
    "inbox",
    "outbox",
    "migrations",
    "spark_consumers",
    "service_template",
)
# Connection failures (class 08), refused logins (28), a missing database (3D), a server
# shutting down or starting (57P): the database cannot be used, as opposed to a failed statement.
UNREACHABLE_SQLSTATES = ("08", "28", "3D", "57P")
UNDEFINED_TABLE = "42P01"


class CommandError(Exception):
    """A mistake the command explains in one line, exiting with ``code``."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.code = code


def exit_codes_text() -> str:
    """The exit codes, one a line (the top-level --help's epilog)."""
    return "exit codes:\n" + "\n".join(f"  {c:<3} {text}" for c, text in EXIT_CODES.items())


def bad_settings(exc: Exception, settings_type: type[Any] | None) -> CommandError:
    """A settings error (pydantic's ValidationError, pydantic-settings' SettingsError of a value
    that is not JSON) as one line per bad value: its environment variable as the user spells
    it, what is wrong, the expected form and an example. ``settings_type``: the class read,
    unless the error's stack shows the one that failed (a nested settings class)."""
    from pydantic import ValidationError

    from outboxkit.settings import expected, variable

    title = exc.title if isinstance(exc, ValidationError) else None
    model = _settings_model(exc.__traceback__, title) or settings_type
    if model is None:
        return CommandError(f"bad settings: {first_line(str(exc))}")
    if not isinstance(exc, ValidationError):
        field = re.search(r'field "([^"]+)"', str(exc))
        name, info = variable(model, (field.group(1),)) if field else ("", None)
        problem = "not a JSON value" if isinstance(exc.__cause__, ValueError) else str(exc)
        return CommandError(f"bad setting {name or '?'}: {problem}{expected(name, info)}")
    lines = []
    for error in exc.errors(include_url=False):
        name, info = variable(model, error["loc"])
        cause = error.get("ctx", {}).get("error")
        problem = first_line(str(cause) if error["type"] == "value_error" else error["msg"])
        # A check of several settings (loc ()) names them in its message.
        lines.append(f"bad setting {name}: {problem}{expected(name, info)}" if name else problem)
    return CommandError("\n".join(dict.fromkeys(lines)), USAGE)


def _settings_model(tb: TracebackType | None, title: str | None) -> type[Any] | None:
    """The class of the innermost settings object being built on the failed call's stack
    (named ``title``, when given): the one whose value was bad, e.g. a nested one."""
    from pydantic_settings import BaseSettings

    found = None
    for frame_locals in _frames(tb):
        for value in frame_locals.values():
            if isinstance(value, BaseSettings) and title in (None, type(value).__name__):
                found = type(value)
    return found


def load_job(spec: str) -> Any:
    """`spark_consumers.job.load_job`, its failure as a CommandError that shows the form, or
    where the user's code failed as it ran."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from spark_consumers.job import JobCodeError
    from spark_consumers.job import load_job as load

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise CommandError(f"bad job reference {spec!r}: expected {JOB_FORM}")
    try:
        return load(spec)
    except JobCodeError as exc:
        where = f"(in {exc.where})"
        if isinstance(exc.error, ValidationError | SettingsError):
            lines = str(bad_settings(exc.error, None)).splitlines()
            raise CommandError("\n".join(f"{line} {where}" for line in lines)) from exc
        raise CommandError(f"{failed_code(exc.error, module)} {where}") from exc
    except ValueError as exc:
        if isinstance(exc.__cause__, ValidationError):
            lines = str(bad_settings(exc.__cause__, None)).splitlines()
            where = f"(in the job factory {spec})"
            raise CommandError("\n".join(f"{line} {where}" for line in lines)) from exc
        detail = first_line(str(exc)).removeprefix(f"job {spec!r} ")
        raise CommandError(f"bad job reference {spec!r}: {detail}; expected {JOB_FORM}") from exc


def failed_code(error: BaseException, module: str) -> str:
    """``error``'s type and message, and the file:line of the user's code that raised it: the
    innermost frame outside the framework, the standard library and installed libraries (the
    package of ``module``, the user's, counts wherever it is installed)."""
    own = module.partition(".")[0]
    where = ""
    for frame, line in traceback.walk_tb(error.__traceback__):
        name, filename = str(frame.f_globals.get("__name__", "")), frame.f_code.co_filename
        if _users_code(name.partition(".")[0], filename, own):
            where = f" in {_shown(filename)}:{line}"
    text = first_line(str(error))
    return f"{type(error).__name__}{' ' + text if text else ''}{where}"


def _users_code(top: str, filename: str, own: str) -> bool:
    if top == own:
        return True
    if top in FRAMEWORK or top in sys.stdlib_module_names or filename.startswith("<"):
        return False
    return not {"site-packages", "dist-packages"} & set(Path(filename).parts)


def _shown(filename: str) -> str:
    try:
        return Path(filename).relative_to(Path.cwd()).as_posix()
    except ValueError:
        return filename


# What sets the database of an operator command, named when it cannot be reached.
DATABASE_SETTING = "OUTBOXKIT_DATABASE_URL or --url"


def translate(
    exc: BaseException, settings: Mapping[str, Any], *, database: str = DATABASE_SETTING
) -> tuple[str, int] | None:
    """The one line (or lines) and exit code of a usual mistake; None for anything else.
    ``settings`` gives the endpoints named in a message when the error does not carry them;
    ``database``: what sets the database, named when it cannot be reached."""
    if isinstance(exc, CommandError):
        return str(exc), exc.code
    found_in = (_missing_extra, _connect, _endpoint, _bad_value)
    known = (_database(exc, database), *(f(exc) for f in found_in), _kafka(exc, settings))
    for found in known:
        if found is not None:
            return found
    return None


# Extras for working on the repository, never the answer to a command's missing module.
_TOOLING_EXTRAS = ("dev", "docs")


def _missing_extra(exc: BaseException) -> tuple[str, int] | None:
    """A module one of the framework's extras installs, missing: which extra to install. Looks
    through the causes: a library may raise its own ImportError from the missing module's."""
    seen: BaseException | None = exc
    while seen is not None and not (isinstance(seen, ModuleNotFoundError) and seen.name):
        seen = seen.__cause__ or seen.__context__
    if not isinstance(seen, ModuleNotFoundError) or not seen.name:
        return None
    module = seen.name.partition(".")[0]
    extras = extras_installing(module)
    if not extras:
        return None
    which = " or ".join(f'"{e}"' for e in extras)
    needs = (
        f"outboxkit's {which} extra" if len(extras) == 1 else f"one of outboxkit's {which} extras"
    )
    installs = " or ".join(f'pip install "outboxkit[{e}]"' for e in extras)
    return f"this command needs {needs} ({module} is not installed): {installs}", USAGE


def extras_installing(module: str) -> list[str]:
    """The framework's extras (its tooling's apart) whose requirements install ``module``, by
    the installed distribution's metadata; none when it is not installed as a distribution."""
    from importlib import metadata

    try:
        requirements = metadata.requires("outboxkit") or []
    except metadata.PackageNotFoundError:
        return []
    wanted = module.lower().replace("-", "_")
    found: list[str] = []
    for requirement in requirements:
        named = re.match(r"\s*([A-Za-z0-9_.-]+)", requirement)
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", requirement)
        if named is None or extra is None or extra.group(1) in _TOOLING_EXTRAS:
            continue
        distribution = named.group(1).lower().replace("-", "_").replace(".", "_")
        if wanted in (distribution, distribution.removeprefix("python_")):
            found.append(extra.group(1))
    return list(dict.fromkeys(found))


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), text)


def _database(exc: BaseException, setting: str = DATABASE_SETTING) -> tuple[str, int] | None:
    orig = getattr(exc, "orig", None)
    sqlstate = getattr(orig, "sqlstate", None)
    kind = type(exc).__name__
    if kind == "OperationalError" and (
        sqlstate is None or str(sqlstate).startswith(UNREACHABLE_SQLSTATES)
    ):
        url = _engine_url(exc.__traceback__)
        where = f" at {url.render_as_string()}" if url is not None else ""
        cause = first_line(str(orig if orig is not None else exc))
        job = _job(exc.__traceback__)
        check = setting if job is None else _job_setting(job, "database_url")
        return f"cannot reach the database{where}: {cause}; check {check}", UNREACHABLE
    if kind == "ProgrammingError" and sqlstate == UNDEFINED_TABLE:
        missing = re.search(r'relation "([^"]+)" does not exist', str(orig))
        if missing is None or missing.group(1).rpartition(".")[2] not in _framework_tables():
            return None
        url = _engine_url(exc.__traceback__)
        where = f" in {url.database}" if url is not None else ""
        return (
            f"the framework's tables are missing{where} (no {missing.group(1)}): "
            "run `outboxkit db upgrade`",
            UNREACHABLE,
        )
    return None


def _engine_url(tb: TracebackType | None) -> Any:
    """The URL, password left out, of the innermost SQLAlchemy engine on the failed call's
    stack: the one that connected, wherever the command built it (settings, --url, a job)."""
    from sqlalchemy.engine import Engine

    url = None
    for frame_locals in _frames(tb):
        for value in frame_locals.values():
            if isinstance(value, Engine):
                url = value.url._replace(password=None)
    return url


def _job(tb: TracebackType | None) -> Any:
    """The consumer job whose database or Kafka the failed call reached (the innermost on its
    stack; the first of the jobs one query runs), or None for an operator command's own."""
    job = None
    for frame_locals in _frames(tb):
        for value in frame_locals.values():
            found = value[0] if isinstance(value, list | tuple) and value else value
            if type(found).__name__ == "Job" and hasattr(found, "bootstrap_servers"):
                job = found
    return job


def _job_setting(job: Any, field: str) -> str:
    """The variable that sets ``job``'s ``field`` (its settings' prefix), else the field."""
    prefix = getattr(job, "settings_prefix", None)
    return f"{prefix}{field.upper()}" if prefix else f"the {field} of job {job.name}"


def _frames(tb: TracebackType | None) -> Iterator[Mapping[str, Any]]:
    while tb is not None:
        yield tb.tb_frame.f_locals
        tb = tb.tb_next


def _framework_tables() -> set[str]:
    from inbox.tables import metadata as inbox_metadata
    from outbox.table import metadata as outbox_metadata

    return {t.name for m in (outbox_metadata, inbox_metadata) for t in m.tables.values()}


def _connect(exc: BaseException) -> tuple[str, int] | None:
    transport = exc if _is_transport(exc) else exc.__cause__
    if not _is_transport(transport):
        return None
    try:
        target = transport.request.url  # type: ignore[union-attr]
        url = f" at {target.scheme}://{target.netloc.decode()}"
    except RuntimeError:  # no request attached
        url = ""
    cause = first_line(str(transport)) or type(transport).__name__
    return (
        f"cannot reach Kafka Connect{url}: {cause}; check OUTBOXKIT_CONNECT_URL",
        UNREACHABLE,
    )


def _is_transport(exc: BaseException | None) -> bool:
    return any(
        f"{t.__module__}.{t.__name__}"
        in ("httpx.TransportError", "httpx._exceptions.TransportError")
        for t in type(exc).__mro__
    )


def _kafka(exc: BaseException, settings: Mapping[str, Any]) -> tuple[str, int] | None:
    from outboxkit.kernel.kafka.failures import reason, unanswered

    if not unanswered(exc):
        return None
    job = _job(exc.__traceback__)
    servers = settings.get("kafka_bootstrap_servers") if job is None else job.bootstrap_servers
    where = f" at {servers}" if servers else ""
    check = (
        "OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS"
        if job is None
        else _job_setting(job, "kafka_bootstrap_servers")
    )
    return f"cannot reach Kafka{where}: {reason(exc)}; check {check}", UNREACHABLE


def _endpoint(exc: BaseException) -> tuple[str, int] | None:
    """An endpoint that no setting and no local stack gives: a setting to add."""
    if type(exc).__name__ == "EndpointError":
        return first_line(str(exc)), USAGE
    return None


def _bad_value(exc: BaseException) -> tuple[str, int] | None:
    """A value a setting (or --url) gives that proves wrong when used: a secret file that
    cannot be read, a database URL that cannot be parsed, Kafka security that contradicts
    itself. The messages name the setting."""
    from outboxkit.kernel.engines import DatabaseUrlError
    from outboxkit.kernel.kafka.security import KafkaSecurityError
    from outboxkit.kernel.secrets import SecretError

    if isinstance(exc, DatabaseUrlError):
        return f"bad database URL: {first_line(str(exc))}", USAGE
    if isinstance(exc, SecretError | KafkaSecurityError):
        return first_line(str(exc)), USAGE
    return None
