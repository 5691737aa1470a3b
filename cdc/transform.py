"""outboxkit's Kafka Connect transform (`io.outboxkit.connect.SourcePositionHeaders`, which the
outbox connector runs before Debezium's EventRouter) as an artifact: its jar ships inside the
wheel (``cdc/lib/``) with its SHA-256, and `install` copies it, checked, onto a Connect worker's
plugin path. The repository carries the jar too (a wheel builds from a clone without Java); its
set-up rebuilds it from ``cdc/java/smt`` (every version pinned in ``cdc/java/pom.xml``) and
`publish` checks the build gives the pinned bytes."""

from __future__ import annotations

import hashlib
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from cdc.config import SOURCE_POSITION_HEADERS

LIB = Path(__file__).parent / "lib"
SOURCE = Path(__file__).parent / "java"
# The jar's checksums as the reproducible build gives them (a source checkout only).
PINNED = SOURCE / "smt" / "transform.sums"
JAR_PREFIX = "outboxkit-smt-"
# The directory under a worker's plugin path that holds the transform: a plugin of its own,
# isolated, that takes Connect's API from the worker.
PLUGIN_DIR = "outboxkit-transform"


class TransformError(RuntimeError):
    """The transform's jar is missing, damaged, or could not be installed; the message says how
    to get it."""


@dataclass(frozen=True)
class Transform:
    """The transform's jar as shipped, and its SHA-256 (checked against the shipped sum)."""

    jar: Path
    sha256: str

    @property
    def version(self) -> str:
        """The jar's version (from its file name)."""
        return self.jar.name[len(JAR_PREFIX) : -len(".jar")]


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file, hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shipped(lib: Path | None = None) -> Transform:
    """The jar this installation carries (in ``lib``, default `LIB`), its checksum verified."""
    lib = LIB if lib is None else lib
    jars = sorted(lib.glob(f"{JAR_PREFIX}*.jar"))
    if not jars:
        raise TransformError(
            f"this installation carries no jar of {SOURCE_POSITION_HEADERS} ({lib}): install "
            "outboxkit from its wheel, or in a source checkout run `./dev.sh setup`, which builds "
            "it from cdc/java/smt"
        )
    jar = jars[-1]
    expected = _recorded_sum(jar)
    actual = sha256_of(jar)
    if actual != expected:
        raise TransformError(
            f"{jar} does not match its recorded SHA-256 ({expected}, found {actual}): the "
            "file is damaged; reinstall outboxkit"
        )
    return Transform(jar=jar, sha256=actual)


def _recorded_sum(jar: Path) -> str:
    sums = jar.with_name(jar.name + ".sha256")
    if not sums.exists():
        raise TransformError(f"{jar} has no recorded checksum ({sums.name}): reinstall outboxkit")
    return sums.read_text().split()[0]


def target(plugin_path: Path, transform: Transform) -> Path:
    """Where `install` puts the jar under a worker's plugin path."""
    return plugin_path / PLUGIN_DIR / transform.jar.name


def plan(plugin_path: Path, transform: Transform) -> str:
    """What `install` would do, without doing it: ``unchanged``, ``would install``, or ``would
    replace`` the other versions there; TransformError where it would fail."""
    dest = target(plugin_path, transform)
    if dest.exists() and sha256_of(dest) == transform.sha256:
        return "unchanged"
    _need_directory(plugin_path)
    others = sorted(p.name for p in dest.parent.glob(f"{JAR_PREFIX}*.jar") if p != dest)
    return f"would replace {', '.join(others)} with" if others else "would install"


def _need_directory(plugin_path: Path) -> None:
    if not plugin_path.is_dir():
        raise TransformError(
            f"{plugin_path} is not a directory: give a directory of the worker's plugin.path"
        )


def install(plugin_path: Path, transform: Transform) -> bool:
    """Copy the jar under ``plugin_path`` (its own plugin directory, any other version of it
    removed); False when the same jar is already there."""
    dest = target(plugin_path, transform)
    if dest.exists() and sha256_of(dest) == transform.sha256:
        return False
    _need_directory(plugin_path)
    dest.parent.mkdir(exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    shutil.copyfile(transform.jar, partial)
    if sha256_of(partial) != transform.sha256:
        partial.unlink()
        raise TransformError(f"copying {transform.jar} to {dest} did not give the same bytes")
    partial.replace(dest)
    for old in dest.parent.glob(f"{JAR_PREFIX}*.jar"):  # only once the new one is in place
        if old != dest:
            old.unlink()
    return True


def pinned(sums: Path | None = None) -> dict[str, str]:
    """The pinned checksums of the transform's jar (``sha256``, ``sha512``)."""
    with (PINNED if sums is None else sums).open("rb") as text:
        return {k: str(v) for k, v in tomllib.load(text).items()}


def publish(built: Path, lib: Path | None = None, sums: Path | None = None) -> Transform:
    """Put a freshly built jar where the wheel takes it from, with its checksum, once it is the
    pinned build (a source checkout's set-up does this; the same bytes run on the dev stack's
    Connect, go into the wheel and are named in the Kubernetes manifests)."""
    lib = LIB if lib is None else lib
    digest = sha256_of(built)
    expected = pinned(sums)["sha256"]
    if digest != expected:
        raise TransformError(
            f"the transform built from {SOURCE / 'smt'} has SHA-256 {digest}, not the pinned "
            f"{expected} ({PINNED}): if you changed its source or its pins, put the new sums "
            "there (sha256sum/sha512sum of the jar); else check the JDK (Debian's OpenJDK 17)"
        )
    lib.mkdir(exist_ok=True)
    dest = lib / built.name
    if not (dest.exists() and sha256_of(dest) == digest):
        for old in lib.glob(f"{JAR_PREFIX}*.jar*"):
            old.unlink()
        shutil.copyfile(built, dest)
    dest.with_name(dest.name + ".sha256").write_text(f"{digest}  {dest.name}\n")
    return Transform(jar=dest, sha256=digest)
