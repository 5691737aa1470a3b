"""What an operator does to resume a partition, as transitions of its sources' states
(`inbox.judgement`), one function each for the CLI and the console: start it over, or resume a
partition stopped on positions gone back (as re-sends, or with a restored database's new
history) or on positions stored without identity (the database that wrote them named)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import func, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from inbox import judgement, stops
from inbox.moves import Move, start_over
from inbox.position import TopicIdentity
from inbox.recorder import Recorder
from inbox.states import losts_to_json, states_to_json
from inbox.tables import watermarks


class Refused(ValueError):
    """An operator action that would lose or double events, or has no target: nothing changed."""


@dataclass(frozen=True)
class Rebase:
    """How an operator resumes stopped partitions (`rebase`).

    Attributes:
        offset: Start over: the new watermark (-1: read the topic from its start), the sources'
            positions kept as floors.
        resends: The partitions stopped on positions gone back hold re-sends the window no
            longer knows: each source's top becomes its floor, the watermark stays.
        histories: Per source key, the LSN at which its database's restored or failed-over
            history left the decided one (its timeline's switch point): what it wrote up to
            there is a re-read, what it wrote after is new (`inbox.judgement.new_history`); the
            watermark stays.
        claims: Per source name whose positions were stored before its records carried a
            database identity, the identity of the database that wrote them (a partition
            stopped on `inbox.stops.unclaimed`); the watermark stays.
    """

    offset: int = -1
    resends: bool = False
    histories: Mapping[str, int] = field(default_factory=dict)
    claims: Mapping[str, str] = field(default_factory=dict)

    @property
    def resumes(self) -> bool:
        """True when it resumes stopped partitions at their watermark (no start-over)."""
        return self.resends or bool(self.histories) or bool(self.claims)

    def describe(self, move: Move) -> str:
        if self.claims:
            said = ", ".join(f"{k} written by {v}" for k, v in self.claims.items())
            return f"resume at watermark {move.watermark}, positions of {said}"
        if self.histories:
            forks = ", ".join(f"{k} from LSN {lsn}" for k, lsn in self.histories.items())
            return f"resume at watermark {move.watermark}, new history of {forks}"
        if self.resends:
            return f"resume at watermark {move.watermark}, the source's top its floor (re-sends)"
        return f"start over: watermark {move.watermark} -> {self.offset}"


def refusal(move: Move, how: Rebase) -> str | None:
    """Why ``how`` must not resume ``move``'s partition (None: it may). A plain start-over of a
    partition stopped on positions gone back would floor a restored database's new events, and
    of one stopped on positions without identity would let the first database seen claim them;
    each resuming reading fits its own stop only; a new history needs a known source."""
    stopped = move.stopped or ""
    gone_back, unclaimed = stops.held(stopped)
    where = f"[{move.partition}]"
    if sum((bool(how.claims), bool(how.histories), how.resends)) > 1:
        return (
            "--source-identity, --new-history and --as-resends are readings of one stop: choose one"
        )
    named = stops.stopped_source(stopped)
    if how.claims:
        if not (unclaimed or gone_back):
            return (
                f"{where} is not stopped on positions without identity or gone back: "
                "--source-identity resumes only such a stop"
            )
        unknown = [k for k in how.claims if k != named]
        if unknown:
            return f"{where} stopped on source {named}, not on {', '.join(unknown)}"
        return None
    if how.histories or how.resends:
        if not gone_back:
            return (
                f"{where} is not stopped on positions gone back: "
                "--as-resends and --new-history resume only such a stop"
            )
        unknown = [k for k in how.histories if k not in move.positions and k != named]
        if unknown:
            known = ", ".join(move.positions)
            return f"{where} knows no source {', '.join(unknown)} (known: {known})"
        return None
    if gone_back:
        return (
            f"{where} stopped because a source's positions went back: a start-over "
            "would take its database's new events for re-reads and skip them. If its database "
            "was restored or failed over, resume with --new-history SOURCE=LSN (the LSN where "
            "its new timeline began: its .history file); if the records are re-sends the "
            "window forgot, with --as-resends"
        )
    if unclaimed:
        return (
            f"{where} stopped because a database claims positions stored before records "
            "carried identities: a start-over would let it. Say which database wrote them: "
            "--source-identity SOURCE=IDENTITY"
        )
    return None


def rebase(engine: Engine, found: Sequence[Move], current: TopicIdentity, how: Rebase) -> None:
    """Resume ``found`` partitions as ``how`` says, each in one transaction, after every one
    was checked (`refusal`: nothing changes when one is refused). The CLI and the console both
    call this.

    Raises:
        Refused: ``how`` would lose or double events on one of them.
    """
    refused = [why for why in (refusal(m, how) for m in found) if why is not None]
    if refused:
        raise Refused("; ".join(refused))
    for move in found:
        if how.resumes:
            resume(engine, move, how)
        else:
            start_over(engine, move, current, offset=how.offset, by_operator=True)


def resumed(
    states: Mapping[str, judgement.SourceState], stopped: str | None, how: Rebase
) -> dict[str, judgement.SourceState]:
    """The sources' states of a partition stopped on ``stopped`` once ``how`` resumes it: as
    re-sends, the stopped source's top becomes its floor; with a new history, each named
    source's decided positions end at its fork, and what it decided above the fork is a lost
    history whose end here is the record the partition stopped on (`inbox.judgement.Lost`)."""
    out = dict(states)
    reason = stopped or ""
    if how.resends:
        named = stops.stopped_source(reason)
        chosen = {k: s for k, s in out.items() if named is None or k == named}
        out.update(judgement.floored(chosen, stops.stopped_top(reason)))
    marker = stops.stopped_event(reason)
    for key, fork in how.histories.items():
        out[key] = judgement.new_history(fork, out.get(key), marker)
    return out


def resume(engine: Engine, move: Move, how: Rebase) -> None:
    """Resume a partition stopped on positions gone back at its watermark, its sources' states
    moved as ``how`` says (`resumed`); its reader starts again from the watermark (the epoch
    goes up)."""
    recorder = Recorder(move.consumer)
    with Session(engine) as session, session.begin():
        locked = recorder.locked(session, move.topic, move.partition)
        states = resumed(locked.sources, locked.stopped, how)
        tops, ids, floors = states_to_json(states)
        identities = {**locked.identities, **how.claims}
        session.execute(
            update(watermarks)
            .where(*recorder.match(watermarks, move.topic, move.partition))
            .values(
                sources=tops,
                tops=ids,
                floors=floors,
                lost_histories=losts_to_json(states),
                source_identities=identities,
                stopped=None,
                epoch=watermarks.c.epoch + 1,
                updated_at=func.now(),
            )
        )


def parse_lsn(text: str) -> int:
    """An LSN as Postgres writes it (``16/B374D848``) or as a number."""
    high, sep, low = text.strip().partition("/")
    try:
        return (int(high, 16) << 32) + int(low, 16) if sep else int(high)
    except ValueError:
        raise ValueError(f"{text!r} is not an LSN (like 16/B374D848)") from None
