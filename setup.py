"""The wheel must carry the Connect transform's jar (cdc/lib/, with its SHA-256), which the
repository's set-up builds (`./dev.sh wheel` builds it, then the wheel). A wheel built without it
would install a framework whose connector no team's Connect can run: refuse. An editable
install (the set-up's own, before the jar exists) is not a wheel a team takes home."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

LIB = Path(__file__).resolve().parent / "cdc" / "lib"


class BuildWithTransform(build_py):
    """build_py that refuses to build a wheel without the transform's jar and its checksum."""

    def run(self) -> None:
        jars = list(LIB.glob("outboxkit-smt-*.jar"))
        if not getattr(self, "editable_mode", False) and not (
            jars and all(jar.with_name(jar.name + ".sha256").exists() for jar in jars)
        ):
            raise SystemExit(
                f"no Connect transform jar in {LIB}: build the wheel with `./dev.sh wheel` "
                "(it builds the transform from cdc/java/smt first)"
            )
        super().run()


setup(cmdclass={"build_py": BuildWithTransform})
