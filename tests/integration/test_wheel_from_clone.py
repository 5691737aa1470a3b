"""A service team builds outboxkit's wheel from a clone with Python alone: no dev set-up, no
Maven (the Connect transform's jar is in the repository, checked against its pins)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from uv import find_uv_bin

from cdc import transform
from tests.doc_snippets import ROOT

pytestmark = pytest.mark.integration


def clone(into: Path) -> Path:
    """The repository's tracked files as a fresh clone has them (nothing the set-up built)."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def build(source: Path, dist: Path) -> subprocess.CompletedProcess[str]:
    # The index settings of this machine kept; the repository's venv neither active nor on PATH.
    venv = str(ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(venv)
    )
    return subprocess.run(
        [find_uv_bin(), "build", "--wheel", "--out-dir", str(dist), str(source)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_clone_builds_the_wheel_with_the_pinned_transform(tmp_path: Path) -> None:
    source = clone(tmp_path / "outboxkit")
    assert not (source / ".venv").exists() and not (source / "build").exists()
    done = build(source, tmp_path / "dist")
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("outboxkit-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        jar = archive.read("cdc/lib/outboxkit-smt-1.jar")
        recorded = archive.read("cdc/lib/outboxkit-smt-1.jar.sha256").decode().split()[0]
    assert hashlib.sha256(jar).hexdigest() == recorded == transform.pinned()["sha256"]


def test_a_clone_whose_jar_is_not_the_pinned_build_refuses_to_build(tmp_path: Path) -> None:
    source = clone(tmp_path / "outboxkit")
    (source / "cdc" / "lib" / "outboxkit-smt-1.jar").write_bytes(b"PK\x03\x04 another build")
    done = build(source, tmp_path / "dist")
    assert done.returncode != 0
    assert "no Connect transform jar of the pinned build" in done.stderr + done.stdout
    assert not list((tmp_path / "dist").glob("*.whl"))
