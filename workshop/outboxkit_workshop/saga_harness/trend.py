"""Whether a soak's series grows (pure): the least-squares slope over the run's second half, and
a verdict per series: ``flat`` (its second-half growth within a tolerance), ``bounded`` (it
grows, but stays under a bound that something in the stack enforces) or ``growing``.

A series is named ``family:label`` (``rss:consumers``, ``table rows:payments.inbox_recent``);
its family gives its unit and its tolerance."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

FLAT, BOUNDED, GROWING = "flat", "bounded", "growing"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Family:
    """A kind of series: its title, unit, and the growth over the second half it may show
    whatever its level (noise: a JVM's heap breathing, a table's free space)."""

    title: str
    unit: str
    slack: float
    judged: bool = True  # False: progress figures (orders placed), never a verdict
    # Judged on the running median of this many samples: a fault's catch-up lifts a process's
    # CPU for a sample or two, which is not growth.
    smooth: int = 1


FAMILIES = {
    "rss": Family("resident memory (PSS) outside shared memory", "MiB", 32),
    "shared": Family("shared memory touched (PSS)", "MiB", 32),
    "fds": Family("open file descriptors", "fds", 16),
    "threads": Family("threads", "threads", 8),
    # A process's CPU once it has run a while (`Sampler`'s ``cpu_settle_seconds``); a JVM
    # compiles its hot code for minutes after it starts, shown apart and not judged.
    "cpu": Family("CPU over the interval, settled", "% of a core", 5, smooth=5),
    "cpu warming": Family(
        "CPU over the interval, first minutes of a process", "% of a core", 0, judged=False
    ),
    "slot lag": Family("replication slot lag", "bytes", 16 * MIB),
    "table bytes": Family("table sizes", "bytes", MIB),
    "table rows": Family("table rows", "rows", 100),
    "folder bytes": Family("folder sizes", "bytes", 4 * MIB),
    "folder files": Family("folder files", "files", 50),
    "orders": Family("orders", "orders", 0, judged=False),
    "latency": Family("POST -> final p50 of the interval", "s", 0, judged=False),
}
# How long a JVM runs before its CPU counts as settled: it compiles its hot code for minutes
# after it starts (at 10 orders/s the stack's CPU falls by about a third over its first ten
# minutes, then stays level).
CPU_SETTLE_SECONDS = 600.0
# The share of its level a series may grow by over the second half and still be flat.
SHARE = 0.05


def family(series: str) -> Family:
    """The family of ``series`` (``rss:orders``: resident memory)."""
    return FAMILIES[series.split(":", 1)[0]]


@dataclass(frozen=True)
class Bound:
    """What keeps a series from growing for ever: a value it must stay under, and why."""

    value: float
    why: str


@dataclass(frozen=True)
class Trend:
    """One series over a run: first, last and max, the second half's slope (per hour) and
    growth, the tolerance it was judged by, the bound when one is stated, and the verdict."""

    series: str
    unit: str
    samples: int
    first: float
    last: float
    max: float
    slope_per_hour: float
    growth: float  # over the second half, by its slope
    tolerance: float
    verdict: str
    bound: float | None = None
    bound_why: str = ""


def slope(times: Sequence[float], values: Sequence[float]) -> float:
    """The least-squares slope of ``values`` over ``times`` (per unit of time); 0 for fewer
    than two distinct times."""
    if len(times) < 2:
        return 0.0
    mean_t, mean_v = statistics.fmean(times), statistics.fmean(values)
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / spread


def running_median(values: Sequence[float], width: int) -> list[float]:
    """Each value replaced by the median of the ``width`` values centred on it (fewer at the
    ends); ``width`` 1 leaves them as they are."""
    if width <= 1:
        return list(values)
    half = width // 2
    return [statistics.median(values[max(0, i - half) : i + half + 1]) for i in range(len(values))]


def second_half(times: Sequence[float], values: Sequence[float]) -> tuple[list[float], list[float]]:
    """The points at or after the middle of the run's time span."""
    middle = (times[0] + times[-1]) / 2
    kept = [(t, v) for t, v in zip(times, values, strict=True) if t >= middle]
    return [t for t, _ in kept], [v for _, v in kept]


def classify(growth: float, tolerance: float, peak: float, bound: Bound | None) -> str:
    """``flat`` when ``growth`` is within ``tolerance``, else ``bounded`` when ``peak`` stays
    under the bound, else ``growing``."""
    if growth <= tolerance:
        return FLAT
    return BOUNDED if bound is not None and peak <= bound.value else GROWING


def trend(
    series: str,
    times: Sequence[float],
    values: Sequence[float | None],
    bound: Bound | None = None,
) -> Trend:
    """The trend of one series (``times`` in seconds; None: not sampled that time, e.g. the
    database was down); a series without any value is flat at 0."""
    kind = family(series)
    points = [(t, v) for t, v in zip(times, values, strict=True) if v is not None]
    ts, vs = [t for t, _ in points], [v for _, v in points]
    if not points:
        return Trend(series, kind.unit, 0, 0.0, 0.0, 0.0, 0.0, 0.0, kind.slack, FLAT)
    half_t, half_v = second_half(ts, running_median(vs, kind.smooth))
    per_second = slope(half_t, half_v)
    growth = per_second * (half_t[-1] - half_t[0])
    tolerance = max(kind.slack, SHARE * abs(statistics.median(half_v)))
    return Trend(
        series,
        kind.unit,
        len(points),
        vs[0],
        vs[-1],
        max(vs),
        per_second * 3600,
        growth,
        tolerance,
        classify(growth, tolerance, max(vs), bound) if kind.judged else "",
        bound.value if bound else None,
        bound.why if bound else "",
    )


def per_order(
    times: Sequence[float],
    values: Sequence[float | None],
    orders: Sequence[float | None],
    *,
    factor: float = 1.5,
) -> float | None:
    """A bound for what grows with the data kept by design (Kafka's log within its retention,
    the business rows): the first value plus ``factor`` times the first half's growth per order,
    times the orders at the end. None when the first half placed no orders."""
    points = [
        (t, v, n)
        for t, v, n in zip(times, values, orders, strict=True)
        if v is not None and n is not None
    ]
    if len(points) < 2:
        return None
    middle = (points[0][0] + points[-1][0]) / 2
    start, half = points[0], [p for p in points if p[0] <= middle][-1]
    placed = half[2] - start[2]
    if placed <= 0:
        return None
    return start[1] + factor * (half[1] - start[1]) / placed * (points[-1][2] - start[2])
