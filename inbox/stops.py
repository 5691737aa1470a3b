"""The reasons a partition stops on a source's positions, as the judgement writes them
(`inbox.judgement`), and what an operator's resume reads back from them (`inbox.transitions`):
the source, the event, the top the slice had reached, and which stops a start-over would hide.
Pure text, no state."""

from __future__ import annotations

from outboxkit.kernel.wire.position import Position


def went_back(source: str, position: Position, top: Position, event_id: str | None) -> str:
    """Why a partition stops on a record whose source's position went back."""
    return (
        f"event {event_id} has source {source} position {list(position)}, below the "
        f"{list(top)} the partition decided, and nothing says it was applied here: the "
        "source's positions went back (a database restored or failed over, two databases under "
        "one source name), or it is a re-send the window no longer holds; see the runbook "
        "'When positions go back' (outboxkit inbox rebase --new-history or --as-resends)"
        f"{GONE_BACK}"
    )


def stopped_source(reason: str) -> str | None:
    """The source a stop reason names (`went_back`, `unclaimed`); None for other stops."""
    if UNCLAIMED in reason and reason.startswith("source "):
        return reason[len("source ") :].split("'s positions", 1)[0]
    if GONE_BACK not in reason:
        return None
    head, sep, _ = reason.partition(" has source ")
    return reason[len(head) + len(sep) :].split(" position ", 1)[0] if sep else None


def unclaimed(source: str, identity: str) -> str:
    """Why a partition stops on `claimed_below`'s source."""
    return (
        f"source {source}'s positions were stored before its records carried a database "
        f"identity, and database {identity} claims them with a record at or below them: which "
        "database wrote them is not known here; see the runbook 'When positions go back' "
        f"(outboxkit inbox rebase --source-identity {source}=IDENTITY){UNCLAIMED}"
    )


UNCLAIMED = " [positions without identity]"


# The tail of a stop reason for positions gone back: what `inbox.transitions.rebase` looks for
# to refuse a plain rebase (its floors would skip a restored database's new events).
GONE_BACK = " [positions went back]"


def held(reason: str | None) -> tuple[bool, bool]:
    """Whether a stop ``reason`` is on positions gone back, and on positions without identity:
    the stops a plain start-over would hide (`inbox.transitions.refusal`), so neither the
    driver nor a plain rebase resumes them."""
    text = reason or ""
    return GONE_BACK in text, UNCLAIMED in text


def stopped_top(reason: str) -> Position | None:
    """The top a stop on positions gone back names (`went_back`): the slice's, as decided up to
    the record it stopped on."""
    if GONE_BACK not in reason:
        return None
    _, sep, rest = reason.partition(", below the [")
    if not sep:
        return None
    commit, _, change = rest.partition("]")[0].partition(",")
    return (int(commit), int(change))


def stopped_event(reason: str) -> str | None:
    """The event id a stop on positions gone back names (`went_back`)."""
    if GONE_BACK not in reason or not reason.startswith("event "):
        return None
    return reason[len("event ") :].split(" ", 1)[0]
