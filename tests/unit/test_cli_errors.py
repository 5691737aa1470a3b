"""The usual mistakes end in one line that says the fix, no traceback, and the documented exit
code: an unreachable database, Kafka or Kafka Connect, a bad setting, a job reference that does not
load. (A database without the framework's tables: tests/integration/test_operator_commands.py.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from outboxkit.commands.errors import JOB_FORM, UNREACHABLE, USAGE


@pytest.fixture
def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def outboxkit(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command in a process of its own, with only the given OUTBOXKIT_* settings and no
    local stack to fall back on."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOXKIT_")}
    clean.update(OUTBOXKIT_STACK_DIR=str(tmp_path / "stack"), **env)
    return subprocess.run(
        [sys.executable, "-m", "outboxkit.cli", *argv],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,  # no .env file
        timeout=60,
    )


def one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == code, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr.strip()


def test_an_unreachable_database(tmp_path: Path, free_port: int) -> None:
    url = f"postgresql+psycopg://shop:secret@127.0.0.1:{free_port}/shop"
    done = outboxkit(tmp_path, "inbox", "status", OUTBOXKIT_DATABASE_URL=url)
    line = one_line(done, UNREACHABLE)
    assert line.startswith(
        f"outboxkit: error: cannot reach the database at "
        f"postgresql+psycopg://shop@127.0.0.1:{free_port}/shop: connection failed: "
    ), line
    assert line.endswith("; check OUTBOXKIT_DATABASE_URL or --url"), line
    assert "secret" not in done.stderr


def test_an_unreachable_kafka_connect(tmp_path: Path, free_port: int) -> None:
    url = f"http://127.0.0.1:{free_port}"
    line = one_line(outboxkit(tmp_path, "cdc", "restart", OUTBOXKIT_CONNECT_URL=url), UNREACHABLE)
    assert line == (
        f"outboxkit: error: cannot reach Kafka Connect at {url}: [Errno 111] Connection refused; "
        "check OUTBOXKIT_CONNECT_URL"
    )


def test_an_unreachable_kafka(tmp_path: Path, free_port: int) -> None:
    servers = f"127.0.0.1:{free_port}"
    done = outboxkit(
        tmp_path,
        *("inbox", "rebase", "--consumer", "payments", "--topic", "outbox.event.order"),
        OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS=servers,
        OUTBOXKIT_DATABASE_URL=f"postgresql+psycopg://shop@{servers}/shop",
    )
    # One line, ours: librdkafka's own log of each failed connection ("%3|...|FAIL|") is off.
    line = one_line(done, UNREACHABLE)
    assert line.startswith(f"outboxkit: error: cannot reach Kafka at {servers}: "), line
    assert line.endswith("; check OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS"), line


def test_a_bad_setting(tmp_path: Path) -> None:
    done = outboxkit(tmp_path, "inbox", "status", OUTBOXKIT_CONSUMER_METRICS_PORT="70000")
    assert one_line(done, USAGE) == (
        "outboxkit: error: bad setting OUTBOXKIT_CONSUMER_METRICS_PORT: "
        "Input should be less than or equal to 65535; expected a whole number from 0 to 65535, "
        "e.g. OUTBOXKIT_CONSUMER_METRICS_PORT=9464"
    )


def test_a_bad_job_reference(tmp_path: Path) -> None:
    assert one_line(outboxkit(tmp_path, "consume", "nowhere:job"), USAGE) == (
        "outboxkit: error: bad job reference 'nowhere:job': cannot be loaded: No module named "
        f"'nowhere'; expected {JOB_FORM}"
    )


def test_a_job_factorys_error_names_the_users_line(tmp_path: Path) -> None:
    (tmp_path / "shopjobs.py").write_text(
        "import os\n\n\ndef orders():\n    return os.environ['SHOP_X']\n"
    )
    assert one_line(outboxkit(tmp_path, "consume", "shopjobs:orders"), USAGE) == (
        "outboxkit: error: KeyError 'SHOP_X' in shopjobs.py:5 (in the job factory shopjobs:orders)"
    )


def test_a_job_module_in_the_current_folder_is_found(tmp_path: Path) -> None:
    """The console script (not ``python -m``, which puts the folder on the path itself) loads
    ``module:attr`` from the folder it runs in, as uvicorn does."""
    (tmp_path / "shopjobs.py").write_text("job = 1\n")
    script = Path(sys.executable).parent / "outboxkit"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOXKIT_")}
    clean.pop("PYTHONPATH", None)
    done = subprocess.run(
        [str(script), "consume", "shopjobs:job"],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
        timeout=60,
    )
    assert one_line(done, USAGE) == (
        "outboxkit: error: bad job reference 'shopjobs:job': is a int, not a "
        f"spark_consumers.Job; expected {JOB_FORM}"
    )


def test_consume_without_java_says_so_before_spark_starts(tmp_path: Path) -> None:
    (tmp_path / "shopjobs.py").write_text(
        "from spark_consumers import Job\n"
        "job = Job(name='j', consumer='j', topics=('t',), handlers={}, "
        "database_url='postgresql+psycopg://u@127.0.0.1/d', bootstrap_servers='127.0.0.1:9')\n"
    )
    script = Path(sys.executable).parent / "outboxkit"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOXKIT_")}
    clean.pop("PYTHONPATH", None)
    clean.pop("JAVA_HOME", None)
    clean["PATH"] = str(tmp_path)  # no java on it
    done = subprocess.run(
        [sys.executable, str(script), "consume", "shopjobs:job"],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
        timeout=60,
    )
    assert one_line(done, USAGE).startswith("outboxkit: error: Spark needs Java 17"), done


@pytest.mark.parametrize(
    ("command", "module", "extra"),
    [("consume", "pyspark", "spark"), ("console", "jinja2", "console")],
)
def test_a_missing_extra_names_the_extra_to_install(
    tmp_path: Path, free_port: int, command: str, module: str, extra: str
) -> None:
    """A base install runs `consume` without pyspark and `console` without jinja2 (here a
    package that raises as a missing one does, first on the path): one line names the extra."""
    missing = tmp_path / "without" / module
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n"
    )
    done = outboxkit(
        tmp_path,
        command,
        "outboxkit_workshop.saga.jobs:orders",
        PYTHONPATH=os.pathsep.join([str(missing.parent), *sys.path]),
        ORDERS_DATABASE_URL=f"postgresql+psycopg://app@127.0.0.1:{free_port}/app",
        ORDERS_KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{free_port}",
    )
    line = one_line(done, USAGE)
    assert f'pip install "outboxkit[{extra}]"' in line and f"{module} is not installed" in line


JOB_MODULE = """
from pydantic_settings import SettingsConfigDict

from service_template.settings import ServiceSettings
from spark_consumers.job import Job
from spark_consumers.settings import ConsumerSettings


class Billing(ServiceSettings, ConsumerSettings):
    model_config = SettingsConfigDict(env_prefix="BILLING2_", env_nested_delimiter="__")


def job() -> Job:
    settings = Billing()
    return Job(
        name="billing2",
        topics=("outbox.event.order",),
        consumer="billing2",
        handlers=dict,
        database_url=settings.database_url,
        bootstrap_servers=settings.kafka_bootstrap_servers,
        **settings.job_options(),
    )
"""


def test_a_job_whose_kafka_is_unreachable_names_its_own_variable(
    tmp_path: Path, free_port: int
) -> None:
    # The job's settings (prefix BILLING2_) give its Kafka, not OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS:
    # the error names the job's variable, before Spark starts, without librdkafka's log lines,
    # once the start's deadline passed (asked again meanwhile, as a running consumer would).
    (tmp_path / "billing_jobs.py").write_text(JOB_MODULE)
    servers = f"127.0.0.1:{free_port}"
    done = outboxkit(
        tmp_path,
        *("consume", "billing_jobs:job", "--once", "--start-timeout", "2"),
        BILLING2_KAFKA_BOOTSTRAP_SERVERS=servers,
        BILLING2_DATABASE_URL="postgresql+psycopg://billing@127.0.0.1:9/billing",
        OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9",
    )
    assert "Traceback" not in done.stderr and done.returncode == UNREACHABLE, done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith("%")], done.stderr
    assert f"job billing2: Kafka at {servers}: KafkaException: " in done.stderr, done.stderr
    assert "; retry 1 in " in done.stderr, done.stderr
    ours = done.stderr.strip().splitlines()[-1]
    assert ours.startswith(f"outboxkit: error: cannot reach Kafka at {servers}: "), ours
    assert ours.endswith("; check BILLING2_KAFKA_BOOTSTRAP_SERVERS"), ours


def test_dev_on_an_install_without_the_workshop_says_where_it_lives(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wheel user following the repository's README types `outboxkit dev stack up`: one line
    says the dev commands belong to the repository (not argparse's "invalid choice")."""
    from outboxkit import cli

    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    assert cli.main(["dev", "stack", "up"]) == USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "belong to outboxkit's repository" in err, err
