"""Settings that explain themselves: a malformed value of any operator setting names its
variable as the user spelt it, with the expected form and an example (exit 2, no traceback);
the plain Postgres URL forms mean psycopg 3; a misspelt variable is pointed out; a command that
reads no settings is not stopped by a bad one; a job factory's error says where it was raised."""

from __future__ import annotations

import os
import re
import string
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outboxkit.cli import OTHER_VARIABLES, load_settings, main, unknown_variables
from outboxkit.commands.errors import USAGE, CommandError, load_job
from outboxkit.kernel.engines import DatabaseUrlError, database_url, engine_for
from outboxkit.kernel.kafka.security import KafkaSecuritySettings
from outboxkit.kernel.secrets import url_with_password
from outboxkit.parsers import NO_SETTINGS
from outboxkit.settings import Settings
from service_template.settings import ServiceSettings
from tests.unit.test_cli_errors import one_line, outboxkit

LETTERS = st.text(string.ascii_letters, min_size=1, max_size=12)
WORDS = st.text(string.ascii_letters + string.digits + "_-.:/ ", min_size=1, max_size=20)
BOOLEANS = {"0", "1", "true", "false", "yes", "no", "on", "off", "t", "f", "y", "n"}


def out_of(low: int, high: int | None = None) -> st.SearchStrategy[str]:
    """Text that is not a whole number from ``low`` to ``high``."""
    outside = st.integers(max_value=low - 1)
    if high is not None:
        outside |= st.integers(min_value=high + 1)
    return outside.map(str) | LETTERS | st.floats(allow_nan=False).map(lambda f: f"{f}x")


def none_of(*allowed: str) -> st.SearchStrategy[str]:
    return LETTERS.filter(lambda v: v not in allowed)


NOT_IDENTIFIER = WORDS.filter(lambda v: not re.fullmatch(r"[a-z0-9_]{1,63}", v))
NOT_QUALIFIED = LETTERS | st.just("public.")
NOT_JSON_LIST = LETTERS | st.lists(st.integers(), min_size=1).map(str) | st.just("{}")
# Malformed values of every operator setting that has any (by field, as the class spells it).
MALFORMED: dict[str, st.SearchStrategy[str]] = {
    "database_url": LETTERS | LETTERS.map(lambda s: f"x{s}://host/db"),
    "slot_name": NOT_IDENTIFIER,
    "publication_name": NOT_IDENTIFIER,
    "cdc_role": NOT_IDENTIFIER,
    "connect_database_port": out_of(1, 65535),
    "cdc_password_reference": WORDS.filter(lambda v: not v.startswith("${")),
    "outbox_tables": NOT_JSON_LIST | NOT_QUALIFIED.map(lambda t: f'["{t}"]'),
    "heartbeat_table": NOT_QUALIFIED,
    "heartbeat_interval_ms": out_of(0),
    "poll_interval_ms": out_of(1),
    "payload_encoding": none_of("text", "expand"),
    "connect_exactly_once": LETTERS.filter(lambda v: v.lower() not in BOOLEANS),
    "topic_prefix": WORDS.filter(lambda v: not re.fullmatch(r"[A-Za-z0-9._-]*", v)),
    "spark_jars": LETTERS | st.just("[1]") | st.just('"a.jar"'),
    "consumer_metrics_port": out_of(0, 65535),
    "console_port": out_of(0, 65535),
    "console_secure_cookie": LETTERS.filter(lambda v: v.lower() not in BOOLEANS),
    "console_insecure_http": LETTERS.filter(lambda v: v.lower() not in BOOLEANS),
    # OUTBOXKIT_KAFKA_*: a protocol or mechanism that is not one, or SASL/TLS under PLAINTEXT.
    "security_protocol": none_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    "sasl_mechanism": none_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    "sasl_username": LETTERS,
    "sasl_password_file": LETTERS,
    "ssl_ca_location": LETTERS,
}
# Settings any text is a good value of (a name, a host, a path read when used).
ANY_TEXT = {
    "database_password_file",
    "kafka_bootstrap_servers",
    "connect_url",
    "connect_user",
    "connect_password_file",
    "stack_dir",
    "connector_name",
    "connect_database_host",
    "cdc_password_file",
    "server_name",
    "message_prefix",
    "cache_dir",
    "consumer_metrics_host",
    "console_host",
    "console_users_file",
    "console_secret_file",
    "console_trace_url",
    "console_docs_url",
    "console_tls_cert_file",
    "console_tls_key_file",
}
# A module of no contracts.
CONTRACTS = "from outbox.contracts import Contracts\n\nCONTRACTS = Contracts()\n"
NESTED = "kafka_security"  # its fields are read as OUTBOXKIT_KAFKA_*
FIELDS = [
    *(("OUTBOXKIT_", f) for f in Settings.model_fields if f != NESTED),
    *(("OUTBOXKIT_KAFKA_", f) for f in KafkaSecuritySettings.model_fields),
]
# The settings examples take their values from (a type's own, or the field's example).
EXAMPLE_LESS = {"sasl_username", "sasl_password_file", "ssl_ca_location"}


@pytest.fixture
def no_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No OUTBOXKIT_* variable, no .env file, no local stack."""
    for name in [n for n in os.environ if n.upper().startswith("OUTBOXKIT_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OUTBOXKIT_STACK_DIR", str(tmp_path / "stack"))
    return tmp_path


def test_every_setting_is_either_malformable_or_free_text() -> None:
    """A new setting is added to one of the two (and so to the property test below)."""
    assert {f for _, f in FIELDS} == set(MALFORMED) | ANY_TEXT
    assert not set(MALFORMED) & ANY_TEXT


@pytest.mark.parametrize(("prefix", "field"), [f for f in FIELDS if f[1] in MALFORMED])
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_malformed_setting_is_named_as_spelt(
    no_settings: Path, prefix: str, field: str, data: st.DataObject
) -> None:
    name = f"{prefix}{field}".upper()
    value = data.draw(MALFORMED[field], label=name)
    with mock.patch.dict(os.environ, {name: value}), pytest.raises(CommandError) as caught:
        load_settings(None)
    message = str(caught.value)
    assert caught.value.code == USAGE
    assert re.search(rf"(?<![A-Z_]){name}(?![A-Z_])", message), message
    assert "Traceback" not in message and "EnvSettingsSource" not in message, message
    if field not in EXAMPLE_LESS:
        assert message.startswith(f"bad setting {name}: "), message
        assert f"e.g. {name}=" in message, message


def test_a_bad_setting_exits_2_in_one_line(
    no_settings: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OUTBOXKIT_KAFKA_SECURITY_PROTOCOL", "FOO")
    assert main(["inbox", "status"]) == USAGE
    err = capsys.readouterr().err
    assert err == (
        "outboxkit: error: bad setting OUTBOXKIT_KAFKA_SECURITY_PROTOCOL: Input should be "
        "'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT' or 'SASL_SSL'; expected one of PLAINTEXT, SSL, "
        "SASL_PLAINTEXT, SASL_SSL, e.g. OUTBOXKIT_KAFKA_SECURITY_PROTOCOL=PLAINTEXT\n"
    )


def test_a_list_setting_says_json(no_settings: Path) -> None:
    bad = {"OUTBOXKIT_SPARK_JARS": "a.jar,b.jar"}
    with mock.patch.dict(os.environ, bad), pytest.raises(CommandError) as caught:
        load_settings(None)
    assert str(caught.value).startswith(
        "bad setting OUTBOXKIT_SPARK_JARS: not a JSON value; expected a JSON list of paths, "
        "e.g. OUTBOXKIT_SPARK_JARS='[\""
    )


def test_a_missing_secret_file_names_its_variable(no_settings: Path) -> None:
    done = outboxkit(
        no_settings,
        "inbox",
        "status",
        OUTBOXKIT_DATABASE_URL="postgresql://shop@127.0.0.1:1/shop",
        OUTBOXKIT_DATABASE_PASSWORD_FILE=str(no_settings / "nowhere"),
    )
    assert one_line(done, USAGE) == (
        "outboxkit: error: bad setting OUTBOXKIT_DATABASE_PASSWORD_FILE: cannot read the secret "
        f"file {no_settings / 'nowhere'}: No such file or directory; expected the file holding "
        "the password (a mounted secret)"
    )


@pytest.mark.parametrize("given_url", ["postgresql://u@db:5432/shop", "postgres://u@db:5432/shop"])
def test_plain_postgres_urls_mean_psycopg(no_settings: Path, given_url: str) -> None:
    wanted = "postgresql+psycopg://u@db:5432/shop"
    assert database_url(given_url).render_as_string() == wanted
    assert engine_for(given_url, "once").url.render_as_string() == wanted
    assert url_with_password(given_url, None).render_as_string() == wanted
    with mock.patch.dict(os.environ, {"OUTBOXKIT_DATABASE_URL": given_url}):
        assert Settings().database_url == wanted
    assert ServiceSettings(database_url=given_url).database_url == wanted


def test_other_drivers_stay_as_given() -> None:
    url = "postgresql+psycopg://u@db/shop"
    assert database_url(url).render_as_string() == url


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://u@db/shop", "'mysql' is not Postgres, the only database outboxkit runs on"),
        ("sqlite:///shop.db", "'sqlite' is not Postgres"),
        ("mssql+pyodbc://u@db/shop", "'mssql+pyodbc' is not Postgres"),
        ("postgresql+nosuch://u@db/shop", "unknown Postgres driver 'postgresql+nosuch'"),
        (
            "postgresql+asyncpg://u@db/shop",
            "the driver of 'postgresql+asyncpg' is not installed (no module 'asyncpg')",
        ),
    ],
)
def test_a_url_outboxkit_cannot_use_is_refused_in_one_line(
    no_settings: Path, url: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(DatabaseUrlError, match=re.escape(said)):
        database_url(url)
    # A command says it in one line (no traceback) and does nothing: no file made for sqlite.
    with mock.patch.dict(os.environ, {"OUTBOXKIT_DATABASE_URL": url}):
        code = main(["db", "current"])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not Path("shop.db").exists()


def test_a_misspelt_variable_names_the_closest(no_settings: Path) -> None:
    environ = {"OUTBOXKIT_DATABSE_URL": "x", "OUTBOXKIT_KAFKA_SECURITY_PROTOCOL": "SSL"}
    assert unknown_variables(environ, [Settings]) == [
        "OUTBOXKIT_DATABSE_URL is not an outboxkit setting (did you mean OUTBOXKIT_DATABASE_URL?)"
    ]
    assert (
        unknown_variables({"OUTBOXKIT_DEBUG": "1", "PATH": "/bin"}, [Settings], ["OUTBOXKIT_DEBUG"])
        == []
    )
    # The consumers' Spark session reads its off switches itself: known, not warned about.
    switches = {"OUTBOXKIT_SPARK_SPECULATION": "false", "OUTBOXKIT_SPARK_FORKLESS_FS": "false"}
    assert unknown_variables(switches, [Settings], OTHER_VARIABLES) == []


def test_the_warning_does_not_stop_the_command(
    no_settings: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (no_settings / "warnedcontracts.py").write_text(CONTRACTS)
    monkeypatch.syspath_prepend(str(no_settings))
    monkeypatch.setenv("OUTBOXKIT_CONECT_URL", "http://connect:8083")
    argv = ["schemas", "check", "--contracts", "warnedcontracts:CONTRACTS", "--dir", "s"]
    assert main(argv) == 0
    assert capsys.readouterr().err == (
        "outboxkit: warning: OUTBOXKIT_CONECT_URL is not an outboxkit setting (did you mean "
        "OUTBOXKIT_CONNECT_URL?)\n"
    )


def test_another_commands_settings_are_known(no_settings: Path) -> None:
    """A dev stack's variable is no misspelling for an operator command, where the workshop is
    installed."""
    pytest.importorskip("outboxkit_workshop")
    from outboxkit.cli import _unknown_variables, build_parser

    with mock.patch.dict(os.environ, {"OUTBOXKIT_SPARK_WORKERS": "2"}):
        assert _unknown_variables(build_parser(), None) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["new-service", "billing", "--dir", "services"],
        ["schemas", "check", "--contracts", "nocontracts:CONTRACTS", "--dir", "s"],
    ],
)
def test_a_command_that_reads_no_settings_ignores_a_bad_one(
    no_settings: Path, argv: list[str]
) -> None:
    (no_settings / "nocontracts.py").write_text(CONTRACTS)
    done = outboxkit(no_settings, *argv, OUTBOXKIT_KAFKA_SECURITY_PROTOCOL="FOO")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert load_settings(NO_SETTINGS) is None


FACTORY = """import os


def settings():
    return os.environ["SHOP_X"]


def orders():
    return settings()
"""


def test_a_job_factorys_error_says_where(
    no_settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (no_settings / "shopfactory.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(no_settings))
    with pytest.raises(CommandError) as caught:
        load_job("shopfactory:orders")
    assert str(caught.value) == (
        "KeyError 'SHOP_X' in shopfactory.py:5 (in the job factory shopfactory:orders)"
    )
    assert caught.value.code == USAGE


def test_a_job_modules_error_says_where(no_settings: Path) -> None:
    (no_settings / "shopmodule.py").write_text("\n\nLIMIT = int('ten')\n")
    done = outboxkit(no_settings, "consume", "shopmodule:orders")
    assert one_line(done, USAGE) == (
        "outboxkit: error: ValueError invalid literal for int() with base 10: 'ten' in "
        "shopmodule.py:3 (in the job module shopmodule)"
    )


def test_a_job_factorys_settings_are_named_as_spelt(
    no_settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (no_settings / "shopsettings.py").write_text(
        "from service_template.settings import ServiceSettings\n"
        "from pydantic_settings import SettingsConfigDict\n\n\n"
        "class ShopSettings(ServiceSettings):\n"
        '    model_config = SettingsConfigDict(env_prefix="SHOPQ_")\n\n\n'
        "def orders():\n    return ShopSettings()\n"
    )
    monkeypatch.syspath_prepend(str(no_settings))
    monkeypatch.delenv("SHOPQ_DATABASE_URL", raising=False)
    with pytest.raises(CommandError) as caught:
        load_job("shopsettings:orders")
    assert str(caught.value) == (
        "bad setting SHOPQ_DATABASE_URL: Field required; e.g. "
        "SHOPQ_DATABASE_URL=postgresql+psycopg://app@db.internal:5432/app "
        "(in the job factory shopsettings:orders)"
    )
