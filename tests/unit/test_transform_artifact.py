"""The Connect transform as an artifact: shipped with its checksum, installed checked onto a
plugin path, and the plugin check `cdc apply` runs before it puts a config."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from cdc import plugins, transform
from cdc.config import SOURCE_POSITION_HEADERS, ConnectorSettings, build_connector_config
from outboxkit.cli import main


def pin(built: Path, sums: Path) -> Path:
    """Pins for ``built`` as the source tree's transform.sums holds them."""
    digest = hashlib.sha256(built.read_bytes()).hexdigest()
    sums.write_text(f'sha256 = "{digest}"\nsha512 = "-"\n')
    return sums


@pytest.fixture
def lib(tmp_path: Path) -> Path:
    """A shipped jar (any bytes) published as the set-up publishes the built one."""
    built = tmp_path / "build" / "outboxkit-smt-1.jar"
    built.parent.mkdir()
    built.write_bytes(b"PK\x03\x04 a jar")
    transform.publish(built, tmp_path / "lib", pin(built, tmp_path / "transform.sums"))
    return tmp_path / "lib"


def test_a_build_that_is_not_the_pinned_one_is_not_published(tmp_path: Path) -> None:
    built = tmp_path / "outboxkit-smt-1.jar"
    built.write_bytes(b"PK\x03\x04 a jar")
    sums = pin(built, tmp_path / "transform.sums")
    built.write_bytes(b"PK\x03\x04 another build")
    with pytest.raises(transform.TransformError, match="not the pinned"):
        transform.publish(built, tmp_path / "lib", sums)
    assert not (tmp_path / "lib").exists()


def test_the_pins_are_a_sha256_and_a_sha512() -> None:
    sums = transform.pinned()
    assert len(sums["sha256"]) == 64 and len(sums["sha512"]) == 128


def test_a_published_jar_is_shipped_with_its_checksum(lib: Path) -> None:
    found = transform.shipped(lib)
    assert found.jar == lib / "outboxkit-smt-1.jar"
    assert found.version == "1"
    assert found.sha256 == transform.sha256_of(found.jar)
    assert (lib / "outboxkit-smt-1.jar.sha256").read_text().split() == [
        found.sha256,
        "outboxkit-smt-1.jar",
    ]


def test_a_missing_or_damaged_jar_says_what_to_do(lib: Path, tmp_path: Path) -> None:
    with pytest.raises(transform.TransformError, match=r"carries no jar.*dev\.sh setup"):
        transform.shipped(tmp_path / "nothing")
    (lib / "outboxkit-smt-1.jar").write_bytes(b"PK\x03\x04 another jar")
    with pytest.raises(transform.TransformError, match="does not match its recorded SHA-256"):
        transform.shipped(lib)


def test_install_puts_the_jar_in_a_plugin_directory_of_its_own_once(
    lib: Path, tmp_path: Path
) -> None:
    plugin_path = tmp_path / "plugins"
    plugin_path.mkdir()
    old = plugin_path / transform.PLUGIN_DIR / "outboxkit-smt-0.jar"
    old.parent.mkdir()
    old.write_bytes(b"an older version")
    shipped = transform.shipped(lib)
    assert transform.install(plugin_path, shipped) is True
    installed = plugin_path / transform.PLUGIN_DIR / "outboxkit-smt-1.jar"
    assert sorted(installed.parent.iterdir()) == [installed]  # the older version removed
    assert transform.sha256_of(installed) == shipped.sha256
    assert transform.install(plugin_path, shipped) is False  # the same jar: nothing to do


def test_install_refuses_a_plugin_path_that_is_not_a_directory(lib: Path, tmp_path: Path) -> None:
    with pytest.raises(transform.TransformError, match="is not a directory"):
        transform.install(tmp_path / "absent", transform.shipped(lib))


def test_the_command_installs_and_reports(
    lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(transform, "LIB", lib)
    into = tmp_path / "plugins"
    into.mkdir()
    assert main(["cdc", "plugin", "--into", str(into), "--dry-run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["action"] == "would install" and not (into / transform.PLUGIN_DIR).exists()
    assert main(["cdc", "plugin", "--into", str(into)]) == 0
    assert "installed: " in capsys.readouterr().out
    assert main(["cdc", "plugin", "--into", str(into), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "unchanged"
    # --dry-run says what the real run would: unchanged, a replacement, or its refusal.
    assert main(["cdc", "plugin", "--into", str(into), "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "unchanged"
    old = into / transform.PLUGIN_DIR / "outboxkit-smt-0.jar"
    old.write_bytes(b"PK\x03\x04 an older build")
    (into / transform.PLUGIN_DIR / "outboxkit-smt-1.jar").unlink()
    assert main(["cdc", "plugin", "--into", str(into), "--dry-run", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)["action"]
    assert said == "would replace outboxkit-smt-0.jar with" and old.exists()
    assert main(["cdc", "plugin", "--into", str(tmp_path / "absent"), "--dry-run"]) != 0
    assert "is not a directory" in capsys.readouterr().err


def test_the_plugin_check_names_every_class_the_config_needs() -> None:
    config = build_connector_config(ConnectorSettings("shop", "db", 5432, "shop", "shop_cdc"))
    needed = plugins.required_classes(config)
    assert "io.debezium.connector.postgresql.PostgresConnector" in needed
    assert SOURCE_POSITION_HEADERS in needed
    assert "io.debezium.transforms.outbox.EventRouter" in needed
    assert plugins.missing(config, needed) == []
    lacking = plugins.missing(config, [c for c in needed if c != SOURCE_POSITION_HEADERS])
    assert lacking == [SOURCE_POSITION_HEADERS]
    assert "outboxkit cdc plugin --into DIR" in plugins.fix_for(lacking)


def test_the_repository_carries_the_pinned_build_of_the_jar() -> None:
    """A clone builds the wheel without Java: the jar it ships is in the repository, and it is
    the pinned reproducible build of cdc/java/smt (the set-up rebuilds it to the same bytes)."""
    found = transform.shipped()
    assert found.sha256 == transform.pinned()["sha256"]
    assert hashlib.sha512(found.jar.read_bytes()).hexdigest() == transform.pinned()["sha512"]
