"""The wheel must carry the Connect transform's jar (cdc/lib/, with its SHA-256). The repository
carries it, built reproducibly from cdc/java/smt and checked here against the pinned sums, so
`pip wheel .` or `python -m build` in a clone needs no Java; the repository's set-up rebuilds it
from source and checks it gives the same bytes. A wheel without it would install a framework
whose connector no team's Connect can run: refuse. An editable install is not a wheel a team
takes home."""

import hashlib
import tomllib
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

LIB = Path(__file__).resolve().parent / "cdc" / "lib"


PINNED = Path(__file__).resolve().parent / "cdc" / "java" / "smt" / "transform.sums"


def _pinned_build() -> bool:
    """True when cdc/lib holds one jar whose bytes are the pinned build's."""
    jars = list(LIB.glob("outboxkit-smt-*.jar"))
    if len(jars) != 1:
        return False
    with PINNED.open("rb") as sums:
        expected = tomllib.load(sums)["sha256"]
    return hashlib.sha256(jars[0].read_bytes()).hexdigest() == expected


class BuildWithTransform(build_py):
    """build_py that refuses to build a wheel without the pinned transform jar."""

    def run(self) -> None:
        if not getattr(self, "editable_mode", False) and not _pinned_build():
            raise SystemExit(
                f"no Connect transform jar of the pinned build in {LIB}: the repository carries "
                "it (restore it with `git checkout cdc/lib`), or rebuild it from cdc/java/smt "
                "with `./dev.sh setup`"
            )
        super().run()


setup(cmdclass={"build_py": BuildWithTransform})
