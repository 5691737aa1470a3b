"""The `outboxkit` command line, the saga demo and the benchmarks."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("outboxkit")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
