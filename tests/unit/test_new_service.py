"""`outboxkit new-service`: the folder it writes, the names it refuses, that it never overwrites,
and that what it generates, for any valid name and options (synchronous or ``--async`` routes,
with or without ``--consumes``), passes ruff (lint and format), mypy strict and its own unit
tests, imports only public names, packages its migrations and wires alembic.ini to its
settings."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import keyword
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from outboxkit.cli import main
from outboxkit.commands.new_service import (
    MAX_NAME,
    NAME,
    TAKEN,
    TOKEN,
    NewServiceError,
    ServiceSpec,
    generate,
    template_files,
)
from outboxkit_workshop.devstack.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# The framework's packages from this checkout (their sources carry the types mypy checks); the
# cache is kept with the project's (ignored by git): later runs check the service only.
MYPY_ENV = {**os.environ, "MYPYPATH": str(ROOT)}
MYPY_CACHE = ROOT / ".mypy_cache" / "generated-services"
COMMON = {
    ".dockerignore",
    ".gitignore",
    "Dockerfile",
    "README.md",
    "alembic.ini",
    "pyproject.toml",
    "wheels/README.md",
    "billing/__init__.py",
    "billing/app.py",
    "billing/contracts.py",
    "billing/migrate.py",
    "billing/serve.py",
    "billing/settings.py",
    "billing/tables.py",
    "billing/migrations/env.py",
    "billing/migrations/script.py.mako",
    "billing/migrations/versions/0001_billing.py",
    "tests/test_unit.py",
    "tests/test_integration.py",
}


def cli(parent: Path, *args: str) -> int:
    return main(["new-service", *args, "--dir", str(parent)])


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def run(command: list[str], folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, cwd=folder, capture_output=True, text=True, env={**os.environ, **env}
    )
    assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
    return done


def ruff(folder: Path) -> None:
    """ruff check and ruff format --check, with the folder's own pyproject."""
    run([str(BIN / "ruff"), "check", "--no-cache", "."], folder)
    run([str(BIN / "ruff"), "format", "--no-cache", "--check", "."], folder)


@pytest.fixture(scope="module")
def billing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("services")
    assert cli(parent, "billing", "--consumes", "orders_feed", "--consumes", "stock") == 0
    return parent / "billing"


@pytest.fixture(scope="module")
def publisher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("services")
    assert cli(parent, "billing") == 0
    return parent / "billing"


@pytest.fixture(scope="module")
def async_billing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("services")
    args = ("billing", "--async", "--consumes", "orders_feed", "--consumes", "stock")
    assert cli(parent, *args) == 0
    return parent / "billing"


def test_the_folder_holds_the_service_its_migrations_tests_container_and_readme(
    billing: Path,
) -> None:
    assert set(snapshot(billing)) == COMMON | {"billing/consumer.py"}
    for text in snapshot(billing).values():
        assert not TOKEN.search(text.decode()), "a template token was left unreplaced"
        assert "#> " not in text.decode(), "a template directive was left in"
    contracts = (billing / "billing/contracts.py").read_text()
    assert 'event_type = "BillingItemCreated"' in contracts
    assert 'event_type = "OrdersFeedItemCreated"' in contracts
    assert 'aggregate_type = "stock"' in contracts
    assert "OrdersFeedItemCreated,  # published by orders_feed" in contracts
    pyproject = (billing / "pyproject.toml").read_text()
    assert re.search(r'dependencies = \["outboxkit\[service,spark\](~=[\d.]+)?"\]', pyproject)
    readme = (billing / "README.md").read_text()
    assert "python -m billing.migrate" in readme and "BILLING_DATABASE_URL" in readme
    assert "-py3-none-any.whl[service,spark]" in readme


def test_without_consumes_the_service_only_publishes(publisher: Path) -> None:
    assert set(snapshot(publisher)) == COMMON
    text = "".join(t.decode() for t in snapshot(publisher).values())
    for consumer_part in ("received_items", "from spark_consumers", "--target consumer"):
        assert consumer_part not in text
    assert 'dependencies = ["outboxkit[service]' in (publisher / "pyproject.toml").read_text()
    assert "AS consumer" not in (publisher / "Dockerfile").read_text()


def test_async_makes_the_routes_async_and_keeps_the_consumer_synchronous(
    billing: Path, async_billing: Path
) -> None:
    assert set(snapshot(async_billing)) == set(snapshot(billing))
    for text in snapshot(async_billing).values():
        assert not TOKEN.search(text.decode()) and "#> " not in text.decode()
    app = (async_billing / "billing/app.py").read_text()
    for part in (
        "router = async_service_router(",
        "UoW = Annotated[AsyncUnitOfWork, Depends(async_unit_of_work)]",
        "async def create_item(",
        "async def get_item(",
        "await uow.session.execute(insert(items)",
        "await uow.publish_event(ItemCreated(",
        "return await idempotent_async(",
    ):
        assert part in app, part
    sync_app = (billing / "billing/app.py").read_text()
    for sync_part in ("service_router(", "unit_of_work", "idempotent(", "orm import Session"):
        assert re.search(rf"(?<![\w.]){re.escape(sync_part)}", app) is None, sync_part
        assert sync_part in sync_app
    assert "async def" not in sync_app and "await" not in sync_app
    # Its handlers run in Spark's executors: the same synchronous consumer either way.
    consumer = "billing/consumer.py"
    assert (async_billing / consumer).read_text() == (billing / consumer).read_text()
    assert "asyncio.run(record_item(" in (async_billing / "tests/test_unit.py").read_text()
    assert "async def" in (async_billing / "README.md").read_text()


def test_the_templates_ship_as_package_data() -> None:
    paths = {str(p) for p, _ in template_files()}
    assert {"__service__/app.py", "tests/test_unit.py", ".dockerignore"} <= paths
    # Package data globs skip hidden files: a dot file's template is named dot.<name>.tmpl.
    templates = ROOT / "outboxkit/templates"
    assert not [p for p in templates.rglob(".*") if p.name != "__pycache__"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    line = next(x for x in pyproject.splitlines() if x.startswith("outboxkit = ["))
    assert '"templates/**/*.tmpl"' in line


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("#> if consumes\nx\n", "never closed"),
        ("x\n#> end\n", "closes no directive"),
        ("name = '__upstream__'\n", "outside a '#> for upstream' block"),
        ("#> if async\n#> if sync\nx\n#> end\n", "never closed"),
    ],
)
def test_a_broken_template_is_refused(template: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ServiceSpec("billing", ("stock",)).render(template)


def test_directives_keep_and_repeat_lines_by_the_options() -> None:
    template = (
        "a\n#> if consumes\n#> for upstream\n- __upstream__ __Upstream__\n#> end\n#> end\n"
        "#> if publishes only\nalone\n#> end\n"
    )
    assert ServiceSpec("b", ("c_d", "e")).render(template) == "a\n- c_d CD\n- e E\n"
    assert ServiceSpec("b").render(template) == "a\nalone\n"


def test_async_and_sync_directives_keep_lines_by_the_option_and_nest() -> None:
    template = (
        "#> if sync\ndef f\n#> end\n#> if async\nasync def f\n"
        "#> if consumes\n#> for upstream\n__upstream__\n#> end\n#> end\n#> end\n"
    )
    assert ServiceSpec("b", ("c",)).render(template) == "def f\n"
    assert ServiceSpec("b", ("c", "d"), asynchronous=True).render(template) == "async def f\nc\nd\n"
    assert ServiceSpec("b", asynchronous=True).render(template) == "async def f\n"


def _reference_packages() -> tuple[str, ...]:
    """PACKAGES of docs/hooks/api_reference.py: the packages whose ``__all__`` is public API."""
    spec = importlib.util.spec_from_file_location(
        "api_reference", ROOT / "docs" / "hooks" / "api_reference.py"
    )
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return tuple(hook.PACKAGES)


@pytest.mark.parametrize("variant", ["billing", "async_billing"])
def test_the_service_imports_only_public_names_of_the_framework(
    variant: str, request: pytest.FixtureRequest
) -> None:
    billing: Path = request.getfixturevalue(variant)
    public = _reference_packages()
    framework = {p.split(".")[0] for p in public}
    private = []
    for path in billing.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                private += [a.name for a in node.names if a.name.split(".")[0] in framework]
            elif isinstance(node, ast.ImportFrom) and node.module:
                if node.module.split(".")[0] not in framework:
                    continue
                if node.module not in public:
                    private.append(f"{path.name}: {node.module}")
                    continue
                names = importlib.import_module(node.module).__all__
                private += [f"{node.module}.{a.name}" for a in node.names if a.name not in names]
    assert private == [], "imports outside a framework package's __all__"


def test_the_migrations_ship_with_the_installed_package(billing: Path, tmp_path: Path) -> None:
    # setuptools' build_py: what a wheel of the service holds (a pure-Python one), in a copy.
    folder = Path(shutil.copytree(billing, tmp_path / "billing"))
    build = [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py"]
    run([*build, "--build-lib", str(tmp_path / "lib")], folder)
    migrations = tmp_path / "lib/billing/migrations"
    for data in ("env.py", "script.py.mako", "versions/0001_billing.py"):
        assert (migrations / data).is_file(), data


def test_alembic_ini_takes_the_url_from_the_service_settings(billing: Path) -> None:
    url = "postgresql+psycopg://billing@db.invalid:5432/billing"
    alembic = [str(BIN / "alembic"), "upgrade", "head", "--sql"]
    done = run(alembic, billing, BILLING_DATABASE_URL=url, PYTHONPATH=str(ROOT))
    assert "CREATE TABLE items" in done.stdout and "CREATE TABLE received_items" in done.stdout
    assert "CREATE TABLE billing_alembic_version" in done.stdout


def test_the_dockerfile_installs_the_service_and_runs_it_unprivileged(billing: Path) -> None:
    text = (billing / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (.+) \S+$", text, re.MULTILINE):
        assert all((billing / s).exists() for s in source.split()), source
    assert re.search(r"^FROM python:3\.\d+-slim\S* AS base$", text, re.MULTILINE)
    assert "pip install --find-links /tmp/wheels ." in text
    stages = re.split(r"^FROM ", text, flags=re.MULTILINE)
    assert [s.split()[-1] for s in (x.splitlines()[0] for x in stages[1:])] == [
        "base",
        "consumer",
        "service",
    ]
    for stage in stages[2:]:
        assert "USER service" in stage
    assert 'CMD ["python", "-m", "billing.serve"]' in stages[3]
    assert '"outboxkit", "consume", "billing.consumer:job"' in stages[2]


# -- any valid name, any options ---------------------------------------------------------------
def _valid(name: str) -> bool:
    return (
        len(name) <= MAX_NAME
        and name not in TAKEN
        and not keyword.iskeyword(name)
        and name not in sys.stdlib_module_names
    )


names = st.from_regex(NAME, fullmatch=True).filter(_valid)
specs = st.builds(
    lambda name, upstreams, asynchronous: ServiceSpec(name, tuple(upstreams), asynchronous),
    names | st.sampled_from(["a", "x" * MAX_NAME, "a_1_b_2_c_3_d_4_e_5_f_6_g_7_h8"]),
    st.lists(names | st.just("z" * MAX_NAME), max_size=3, unique=True),
    st.booleans(),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(spec=specs)
def test_any_valid_service_passes_ruff_check_and_format(spec: ServiceSpec) -> None:
    try:
        spec.check()
    except NewServiceError:
        assume(False)
    with tempfile.TemporaryDirectory() as parent:
        ruff(generate(spec, Path(parent)))


# Few and extreme: mypy takes seconds per service (about 30 on a cold cache). Each twice:
# synchronous and --async routes.
CHECKED = [
    ServiceSpec(name, upstreams, asynchronous)
    for name, upstreams in [
        ("a", ()),
        ("x" * MAX_NAME, ("the_longest_upstream_name_here", "b_c")),
    ]
    for asynchronous in (False, True)
]


@pytest.mark.parametrize(
    "spec",
    CHECKED,
    ids=lambda s: f"{s.name}-{len(s.upstreams)}-{'async' if s.asynchronous else 'sync'}",
)
def test_the_service_passes_mypy_strict_and_its_unit_tests(
    spec: ServiceSpec, tmp_path: Path
) -> None:
    folder = generate(spec.check(), tmp_path)
    ruff(folder)
    mypy = run([str(BIN / "mypy"), "--cache-dir", str(MYPY_CACHE)], folder, **MYPY_ENV)
    assert "Success" in mypy.stdout
    tests = ["-m", "pytest", "-m", "not integration", "-q", "-p", "no:cacheprovider"]
    done = run([sys.executable, *tests], folder, PYTHONPATH=str(ROOT))
    assert " passed" in done.stdout and "failed" not in done.stdout


def _installed_closure(requirement: str) -> set[str]:
    """The distributions ``requirement`` installs here (itself, its extras', transitively)."""
    seen: set[str] = set()
    todo = [Requirement(requirement)]
    while todo:
        wanted = todo.pop()
        if canonicalize_name(wanted.name) in seen:
            continue
        try:
            requires = metadata.distribution(wanted.name).requires or []
        except metadata.PackageNotFoundError:  # an optional one not installed here
            continue
        seen.add(canonicalize_name(wanted.name))
        for text in requires:
            needed = Requirement(text)
            extras = wanted.extras or {""}
            if needed.marker is None or any(needed.marker.evaluate({"extra": e}) for e in extras):
                todo.append(needed)
    return seen


def test_taken_covers_what_the_service_imports() -> None:
    distributions = _installed_closure("outboxkit[service,spark]")
    for tool in ("pytest", "ruff", "mypy"):  # the service's dev extra
        distributions |= _installed_closure(tool)
    imported = {
        top
        for top, owners in metadata.packages_distributions().items()
        if NAME.fullmatch(top) and any(canonicalize_name(d) in distributions for d in owners)
    }
    assert sorted(imported - TAKEN) == []


# -- refusals ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    ["Billing", "2fast", "my-service", "a__b", "billing_", "", "class", "json", "outbox", "x" * 31],
)
def test_a_bad_name_is_refused_with_exit_2_and_nothing_written(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(tmp_path, name) == 2
    assert "outboxkit new-service: error:" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("consumes", "problem"),
    [
        (["billing"], "names the service itself"),
        (["Orders"], "--consumes 'Orders'"),
        (["orders", "orders"], "names a service twice"),
        (["a_1b", "a1b"], "give the same event type (A1bItemCreated)"),
        (["billing_"], "--consumes"),
    ],
)
def test_a_bad_consumed_service_is_refused(
    tmp_path: Path, consumes: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [arg for upstream in consumes for arg in ("--consumes", upstream)]
    assert cli(tmp_path, "billing", *args) == 2
    assert problem in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_second_run_refuses_to_overwrite_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(tmp_path, "billing") == 0
    folder = tmp_path / "billing"
    (folder / "billing/app.py").write_text("# edited by its owner\n")
    before = snapshot(folder)
    capsys.readouterr()
    assert cli(tmp_path, "billing", "--consumes", "other") == 2
    err = capsys.readouterr().err
    assert "exists and is not empty" in err and "nothing was written" in err
    assert snapshot(folder) == before


def test_an_empty_folder_of_that_name_is_used(tmp_path: Path) -> None:
    (tmp_path / "billing").mkdir()
    assert cli(tmp_path, "billing") == 0
    assert (tmp_path / "billing/billing/app.py").exists()


def test_help_says_what_each_option_accepts_and_its_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["new-service", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--dir PATH" in text and "--consumes SERVICE" in text and "--async" in text
    assert "lower-case letters and digits" in text and "default: the current folder" in text
    assert "repeat it for several" in text and "default: none" in text
    assert "handlers stay synchronous" in text and "default: synchronous routes" in text


def test_the_service_commands_say_the_usual_mistakes_in_one_line(billing: Path) -> None:
    """Its migrate (and serve) fail as outboxkit's commands do: one line naming the service's
    own variable, the commands' exit codes, no traceback."""
    dead = f"postgresql+psycopg://billing@127.0.0.1:{free_port()}/billing"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_")}
    cases = {
        dead: (
            3,
            "billing.migrate: error: cannot reach the database at",
            "check BILLING_DATABASE_URL",
        ),
        "mysql://billing@db/billing": (
            2,
            "billing.migrate: error: bad setting BILLING_DATABASE_URL",
            "not Postgres",
        ),
    }
    for url, (code, start, said) in cases.items():
        done = subprocess.run(
            [sys.executable, "-m", "billing.migrate"],
            cwd=billing,
            capture_output=True,
            text=True,
            env={**env, "BILLING_DATABASE_URL": url, "PYTHONPATH": f"{billing}:{ROOT}"},
        )
        assert done.returncode == code, done.stderr
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(start) and said in done.stderr, done.stderr


def test_alembic_on_an_unreachable_database_says_so_in_one_line(billing: Path) -> None:
    dead = f"postgresql+psycopg://billing@127.0.0.1:{free_port()}/billing"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_")}
    done = subprocess.run(
        [str(BIN / "alembic"), "check"],
        cwd=billing,
        capture_output=True,
        text=True,
        env={**env, "BILLING_DATABASE_URL": dead, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert lines[0].startswith("alembic: error: cannot reach the database at "), lines
    assert lines[0].endswith("check BILLING_DATABASE_URL"), lines
