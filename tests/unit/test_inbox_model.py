"""The inbox's judgement as a stateful model (`tests.unit.inbox_model`): every move a producer,
a connector, Kafka, Spark's reader and an operator can make, over several partitions, sources
and databases, with a window small enough to evict; the oracle knows only which ids were
written and which applied. Never applied twice; at the end, once the runbook's path for every
stop is taken and the parked records redriven, every event applied once (skipped ones never).

Besides never twice: a failover needs no operator (`World.needless`: the automatic start-over
never stops on a re-read of what the partition had decided).

Among the moves: connectors upgraded to write their databases' identities (positions stored
without one come first, then claimed; a rename or a second database under the name once every
partition read what was sent without identity and learnt whose its positions are, the
runbook's condition: `World.headers_on`).

And a database restored from a physical backup under the same identity (`World.restore`),
resumed by the runbook's `--new-history`. Its new history reuses the positions of the lost one,
and nothing in a record tells the two apart: until the new history passes the lost one's top,
the model avoids what the runbook lists (a move that lays floors over the new history: a
re-created topic, added partitions, a rewind below its first record, `--as-resends` on it; a
second restore), and its connector's re-sends, which a window too small to hold them turns into
a stop that only `--as-resends` resumes; and it restores a database only once the consumer has
read what its connector sent before and no partition re-reads it after a failover (else the
lost history's unread tail and the new one interleave under one source). Telling the histories
apart for good needs the database's timeline in its records.

A short run is part of the default suite; ``OUTBOXKIT_MODEL_EXAMPLES=20000 ./dev.sh test
tests/unit/test_inbox_model.py`` is the long one (docs/testing.md). Each mutant below weakens
one rule and must fail the model."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from inbox import decision, judgement, moves
from tests.unit.inbox_model import World

EXAMPLES = int(os.environ.get("OUTBOXKIT_MODEL_EXAMPLES", "500"))
KEYS = st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1, max_size=3)


class InboxMachine(RuleBasedStateMachine):
    """One consumer's inbox under every move; see the module's docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.world = World(window=4)

    @initialize(upgraded=st.booleans())
    def connectors(self, upgraded: bool) -> None:
        """The connectors write their databases' identities from the start, or only from an
        upgrade on (`identity_headers_on`): positions stored without one come first."""
        for db in self.world.databases:
            db.headers = upgraded

    @rule()
    def identity_headers_on(self) -> None:
        self.world.identity_headers_on()

    @rule(
        db=st.integers(0, 2),
        count=st.integers(1, 4),
        keys=KEYS,
        tie=st.booleans(),
        poison=st.booleans(),
    )
    def write(self, db: int, count: int, keys: list[str], tie: bool, poison: bool) -> None:
        self.world.write(db, count, keys, tie, poison and count == 1)

    @rule(db=st.integers(0, 2), back=st.integers(1, 6))
    def resend(self, db: int, back: int) -> None:
        self.world.resend(db, back)

    @rule(p=st.integers(0, 3), size=st.integers(1, 6))
    def read(self, p: int, size: int) -> None:
        self.world.read(p % self.world.partitions, size)

    @rule(p=st.integers(0, 3), back=st.integers(1, 6))
    def replay(self, p: int, back: int) -> None:
        self.world.replay(p % self.world.partitions, back)

    @rule()
    def restart(self) -> None:
        self.world.restart()

    @rule(shift=st.integers(0, 5))
    def mirror(self, shift: int) -> None:
        self.world.mirror(shift)

    @rule(shift=st.integers(0, 5))
    def mirror_once_caught_up(self, shift: int) -> None:
        """The usual failover: the consumer read everything on the old cluster first."""
        self.world.drain()
        self.world.mirror(shift)

    @rule()
    def recreate(self) -> None:
        self.world.recreate()

    @precondition(lambda self: self.world.headers_on())
    @rule(db=st.integers(0, 2), back=st.integers(0, 4))
    def rename(self, db: int, back: int) -> None:
        self.world.rename(db, back)

    @precondition(lambda self: self.world.headers_on())
    @rule()
    def second_database(self) -> None:
        self.world.second_database()

    @precondition(lambda self: self.world.headers_on())
    @rule(db=st.integers(0, 2), back=st.integers(1, 6))
    def restore(self, db: int, back: int) -> None:
        self.world.restore(db, back)

    @precondition(lambda self: self.world.partitions < 4)
    @rule()
    def add_partition(self) -> None:
        self.world.add_partition()

    @rule(p=st.integers(0, 3), back=st.integers(1, 6))
    def rewind(self, p: int, back: int) -> None:
        self.world.rewind(p % self.world.partitions, back)

    @rule(p=st.integers(0, 3))
    def redrive(self, p: int) -> None:
        self.world.redrive(p % self.world.partitions)

    @rule(p=st.integers(0, 3))
    def skip(self, p: int) -> None:
        self.world.skip(p % self.world.partitions)

    @rule(p=st.integers(0, 3))
    def operator_resolves(self, p: int) -> None:
        assert self.world.resolve(p % self.world.partitions), self.world.rows[
            p % self.world.partitions
        ].stopped

    @invariant()
    def never_twice(self) -> None:
        assert not self.world.twice, f"applied twice: {self.world.twice}"

    @invariant()
    def a_failover_needs_no_operator(self) -> None:
        assert not self.world.needless, f"stopped on a re-read: {self.world.needless}"

    def teardown(self) -> None:
        world = self.world
        for _ in range(20):
            world.drain()
            for p in world.rows:
                assert world.resolve(p), f"no path for [{p}]: {world.rows[p].stopped}"
            world.drain()
            for p in world.rows:
                world.redrive(p)
            world.drain()
            if not any(row.stopped or row.parked for row in world.rows.values()):
                break
        assert not world.twice, f"applied twice: {world.twice}"
        stopped = {p: row.stopped for p, row in world.rows.items() if row.stopped}
        assert not stopped, f"still stopped after the runbook's path: {stopped}"
        expected = [e for e in world.written if e not in world.skipped]
        lost = [e for e in expected if world.applied[e] == 0]
        assert not lost, f"lost: {lost}"
        assert not [e for e in world.skipped if world.applied[e]], "a skipped event applied"


class IdentifiedMachine(InboxMachine):
    """The model with connectors that write their identities from the start: the mutants'
    (the rules they weaken judge by identity; an upgrade's draws would dilute theirs)."""

    @initialize()
    def connectors(self) -> None:  # type: ignore[override]
        pass


def run_model(
    examples: int,
    *,
    shrink: bool = True,
    derandomize: bool = False,
    machine: type[InboxMachine] = InboxMachine,
) -> None:
    phases = list(Phase) if shrink else [Phase.generate]
    run_state_machine_as_test(
        machine,
        settings=settings(
            phases=phases,
            max_examples=examples,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=derandomize,
        ),
    )


def test_every_event_is_applied_once_across_every_move() -> None:
    run_model(EXAMPLES)


# -- mutants: each weakens one rule, and the model must catch it ------------------------------


def _ties_always_new(source, state, position, event_id, *, replayed, decided):  # type: ignore[no-untyped-def]
    return ORIGINAL_JUDGE(
        source,
        replace(state, at_top=frozenset()),
        position,
        event_id,
        replayed=replayed,
        decided=False if decided else decided,
    )


def _keyed_by_name(seen, identities):  # type: ignore[no-untyped-def]
    seen = list(seen)
    out = dict(identities)
    keys = []
    for source, origin in seen:
        if source is None or origin is None:
            keys.append(source)
            continue
        first = out.setdefault(source, origin)
        keys.append(source if first == origin else f"{source}@{origin}")
    return keys, out


def _raised_by_key(rows, names, databases, added):  # type: ignore[no-untyped-def]
    states = [dict(s) for s, _ in rows]
    chosen = {k for row in states for k in row if k.split("@", 1)[0] in names}
    best = judgement.raised(states, chosen)
    merged: dict[str, str] = {}
    for _, identities in rows:
        merged.update(identities)
    out = [({**s, **best}, {**merged, **i}) for s, i in rows]
    return out + [(dict(best), dict(merged))] * added


def _advanced_without_ties(states, decided):  # type: ignore[no-untyped-def]
    out = ORIGINAL_ADVANCED(states, decided)
    return {k: replace(s, at_top=frozenset()) for k, s in out.items()}


def _no_floors(states, **_):  # type: ignore[no-untyped-def]
    return dict(states)


def _raised_without_ties(rows, sources):  # type: ignore[no-untyped-def]
    return {k: replace(s, at_top=frozenset()) for k, s in ORIGINAL_RAISED(rows, sources).items()}


ORIGINAL_JUDGE = judgement.judge
ORIGINAL_RAISED = judgement.raised
ORIGINAL_ADVANCED = judgement.advanced

MUTANTS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "ties judged new whatever was decided at the top": lambda m: m.setattr(
        decision, "judge", _ties_always_new
    ),
    "sources keyed by name, not by their database": lambda m: m.setattr(
        "tests.unit.inbox_model.source_keys", _keyed_by_name
    ),
    "added partitions raised by key, across databases": lambda m: m.setattr(
        moves, "raised_rows", _raised_by_key
    ),
    "the ids at the top forgotten between slices": lambda m: m.setattr(
        judgement, "advanced", _advanced_without_ties
    ),
    "a start-over without floors": lambda m: m.setattr(judgement, "started_over", _no_floors),
    "partitions added without the ids at the top": lambda m: m.setattr(
        judgement, "raised", _raised_without_ties
    ),
    "a restored database's lost history forgotten": lambda m: m.setattr(
        judgement.Lost, "holds", lambda self, position, event_id: False
    ),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_weakened_rule_fails_the_model(mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    MUTANTS[mutant](monkeypatch)
    with pytest.raises((AssertionError, BaseExceptionGroup)) as failed:
        # found is enough (shrinking it takes a minute); the same draws every run, so whether
        # it is found does not depend on the seed
        run_model(3000, shrink=False, derandomize=True, machine=IdentifiedMachine)
    if isinstance(failed.value, BaseExceptionGroup):  # hypothesis found several failures
        assert failed.value.subgroup(AssertionError) is not None


def test_partitions_added_after_an_upgrade_know_the_top_ids_stored_without_identity() -> None:
    """A sequence the model found (20,000 runs): one write of two rows (one position) in two
    partitions before the connector wrote its identity, one row re-sent with it (claimed in its
    partition), partitions added, then the other row re-sent with its identity to a new
    partition: its id was decided at the top under the name alone, and must be known there."""
    world = World(window=4)
    world.databases[0].headers = False
    world.add_partition()
    world.write(0, 2, ["a", "b"], tie=True, poison=False)
    world.identity_headers_on()
    world.resend(0, 1)
    world.add_partition()
    world.resend(0, 3)
    world.drain()
    assert not world.twice
    assert all(world.applied[e] == 1 for e in world.written)
