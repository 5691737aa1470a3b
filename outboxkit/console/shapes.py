"""What the console shows, shaped from what it read (pure: no database, Kafka or web import):
a failure group's kind, lag samples over the last hour and their plot, durations."""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from html import escape

HOUR = 3600.0
# "handler failed: psycopg.errors.UniqueViolation: ..." names the class after "failed: ".
_FAILED_WITH = re.compile(r"failed: (?:[A-Za-z_]\w*\.)*([A-Z]\w*): ")
_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Exit|Interrupt|Timeout))\b")
_KINDS = (
    ("held behind", "held behind a parked record of its key"),
    ("undecodable", "undecodable record"),
    ("unknown event type", "unknown event type"),
    ("invalid payload", "invalid payload"),
    ("the payload check failed", "invalid payload"),
    ("retries exhausted", "retries exhausted"),
)


def cause_kind(cause: str | None) -> str:
    """A failure group's kind: the exception type its cause names (``ValueError``), else what
    kind of refusal it is (an undecodable record, an unknown event type, a record held behind
    its key)."""
    text = cause or ""
    found = _FAILED_WITH.search(text) or _EXCEPTION.search(text)
    if found is not None:
        return found.group(1)
    for start, kind in _KINDS:
        if start in text:
            return kind
    return "other"


@dataclass(frozen=True)
class Sample:
    """One look at a consumer: when (seconds), its summed watermarks and its lag in records."""

    at: float
    offsets: int
    lag: int | None


class Samples:
    """A consumer's samples over the last hour, taken when someone looks (the console reads
    nothing when nobody does)."""

    def __init__(self, keep: float = HOUR) -> None:
        self.keep = keep
        self._samples: deque[Sample] = deque()

    def add(self, sample: Sample) -> None:
        """Keep ``sample``; forget those older than ``keep`` seconds before it."""
        self._samples.append(sample)
        while self._samples and self._samples[0].at < sample.at - self.keep:
            self._samples.popleft()

    def rate(self, *, over: float = 30.0) -> float | None:
        """Offsets applied per second between the newest sample and the newest one at least
        ``over`` seconds older (else the oldest one); None with fewer than two samples."""
        if len(self._samples) < 2:
            return None
        last = self._samples[-1]
        earlier = next(
            (s for s in reversed(self._samples) if s.at <= last.at - over), self._samples[0]
        )
        seconds = last.at - earlier.at
        return max(last.offsets - earlier.offsets, 0) / seconds if seconds > 0 else None

    def __iter__(self) -> Iterator[Sample]:
        return iter(list(self._samples))

    def rates(self) -> list[tuple[float, float]]:
        """(time, offsets per second) between consecutive samples."""
        points = list(self._samples)
        return [
            (b.at, max(b.offsets - a.offsets, 0) / (b.at - a.at))
            for a, b in itertools.pairwise(points)
            if b.at > a.at
        ]


def plot(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    now: float,
    title: str,
    width: int = 600,
    height: int = 120,
) -> str:
    """A figure: an inline SVG of each (name, points) over the last hour, each scaled to its own
    top, and a caption naming each line's colour and top (also the SVG's text alternative)."""
    colours = ("#1f5fa8", "#b3541e")
    left = now - HOUR
    lines, legend = [], []
    for index, (name, points) in enumerate(series):
        shown = [(t, v) for t, v in points if t >= left]
        peak = max((v for _, v in shown), default=0.0)
        top = peak or 1.0
        xy = " ".join(
            f"{(t - left) / HOUR * width:.1f},{height - v / top * (height - 10) - 5:.1f}"
            for t, v in shown
        )
        if xy:
            lines.append(
                f'<polyline fill="none" stroke="{colours[index % len(colours)]}" '
                f'stroke-width="2" points="{xy}"/>'
            )
        said = f"{name}, up to {peak:,.0f}" if shown else f"{name}: none known"
        legend.append((index % len(colours), said))
    label = escape(f"{title}: " + "; ".join(text for _, text in legend) + ", over the last hour")
    caption = " ".join(
        f'<span class="swatch swatch-{i}" aria-hidden="true"></span>{escape(text)}'
        for i, text in legend
    )
    return (
        f'<figure class="plot"><svg viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{label}" preserveAspectRatio="none">'
        f'<rect width="{width}" height="{height}" fill="#fafafa"/>' + "".join(lines) + "</svg>"
        f"<figcaption>{caption}; the last hour, sampled while the console is open</figcaption>"
        "</figure>"
    )


def ago(seconds: float | None) -> str:
    """A duration as people read it: 4 s, 3 min, 2 h 5 min; an em dash when unknown."""
    if seconds is None:
        return "—"
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    hours, minutes = divmod(int(seconds / 60), 60)
    return f"{hours} h {minutes} min"


def count(value: int | None, counted: int = 100_000) -> str:
    """A bounded count as people read it: 1,234; 100,000+ past what was counted; a dash."""
    if value is None:
        return "—"
    return f"{counted:,}+" if value > counted else f"{value:,}"


# Characters a page would not show, or that reorder the text around them: C0 and C1 controls
# (but tab and line feed), zero-width characters and the bidirectional embeddings, overrides
# and isolates. A key or a cause holding one could pass for another (an override reverses
# what follows it).
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)


class Exact(str):
    """Text a page must keep byte for byte (a payload in the edit form): `visible` leaves it."""


def visible(value: object) -> object:
    """Every value a page prints, as it prints it: a text's invisible and reordering
    characters written out as ``\\u202e``; markup the console built, and `Exact` text, as
    they are."""
    if not isinstance(value, str) or isinstance(value, Exact) or hasattr(value, "__html__"):
        return value
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", value)
