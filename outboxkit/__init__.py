"""The `outboxkit` command line, the saga demo and the benchmarks.

Every framework package imports the kernel through this package, so it imports nothing else
and reads its version only when asked."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'outboxkit' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("outboxkit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"
