"""A model of one consumer's inbox over a topic of several partitions, written by several source
databases through their connectors, for the stateful test (`test_inbox_model`).

The inbox's rows are kept in memory (the watermark row's columns, the window of recent ids,
parked and skipped records); every decision and every move of the per-source state goes through
the product's own pure functions (`inbox.position.source_keys`, `inbox.decision.Decider` and
`asks_window`, `inbox.judgement`, `inbox.transitions.refusal`), in the order `inbox.apply.Inbox`
calls them. The world around it (databases, connectors, Kafka, Spark's reader, the operator)
makes every move a user or an operator can make. The oracle knows only which event ids were
written and which were applied."""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass, field, replace

from inbox import judgement, moves, stops, transitions
from inbox.decision import Action, Decider, Incoming, PartitionView, asks_window, prune_floor
from inbox.judgement import SourceState
from inbox.position import TopicIdentity, judge_identity, source_keys


@dataclass(frozen=True)
class Record:
    """A Kafka record as the inbox reads it."""

    offset: int
    key: str
    event_id: str
    source: str
    position: tuple[int, int]
    origin: str | None
    poison: bool = False  # its handler fails until redriven by an operator


@dataclass
class Database:
    """A source database and its connector: its WAL position, name and identity literal."""

    name: str
    identity: str
    position: int = 100
    published: list[Record] = field(default_factory=list)  # what its connector sent, in order
    paused: bool = False
    headers: bool = True  # its connector writes the sourceIdentity header


@dataclass
class Row:
    """One partition's inbox rows (`inbox.tables`)."""

    watermark: int = -1
    sources: dict[str, SourceState] = field(default_factory=dict)
    identities: dict[str, str] = field(default_factory=dict)
    identity: TopicIdentity | None = None
    by_position: bool = False
    epoch: int = 0
    replay_ids: frozenset[str] = frozenset()
    stopped: str | None = None
    stopped_on: str | None = None  # the event the partition stopped on
    window: dict[int, str] = field(default_factory=dict)  # offset -> id (shifted below 0 too)
    parked: list[Record] = field(default_factory=list)

    def positions_view(self) -> dict[str, tuple[int, int]]:
        return {k: s.top for k, s in self.sources.items()}


class World:
    """The topic, its writers, the consumer's reader and inbox; ``applied`` is the oracle's."""

    def __init__(self, window: int, partitions: int = 2) -> None:
        self.window = window
        self.partitions = partitions
        self.incarnation = 0
        self.cluster = 0  # a mirror is another cluster; a re-created topic keeps its cluster
        self.logs: dict[int, list[Record]] = {p: [] for p in range(partitions)}
        self.cursors: dict[int, int] = {p: 0 for p in range(partitions)}
        self.rows: dict[int, Row] = {p: Row() for p in range(partitions)}
        self.databases: list[Database] = [Database("db", "sys1/app")]
        self.written: list[str] = []
        self.applied: Counter[str] = Counter()
        self.skipped: set[str] = set()
        self.poisoned: set[str] = set()
        self.next_event = 0
        self.twice: list[str] = []  # ids applied a second time: the invariant's witness
        # Stops on a re-read of what the partition decided before the topic moved (its
        # automatic start-over must skip those by itself), and per partition how many of the
        # moved log's first records it had decided
        self.needless: list[str] = []
        self.decided_prefix: dict[int, int] = {}
        self.forks: dict[str, int] = {}  # per database identity restored, where its WAL forked
        self.old_tops: dict[str, int] = {}  # per database restored, the top its lost WAL reached
        self.legacy: dict[str, str] = {}  # per source name, the database that wrote it unnamed

    # -- the writers ---------------------------------------------------------------------------
    def partition_of(self, key: str) -> int:
        return zlib.crc32(key.encode()) % self.partitions

    def publish(self, db: Database, record: Record) -> None:
        p = self.partition_of(record.key)
        log = self.logs[p]
        at = log[-1].offset + 1 if log else 0
        placed = replace(record, offset=at)
        log.append(placed)
        db.published.append(placed)

    def write(self, db_index: int, count: int, keys: list[str], tie: bool, poison: bool) -> None:
        """One transaction of ``count`` events (a multi-row write: one position when ``tie``)."""
        db = self.databases[db_index % len(self.databases)]
        if db.paused:
            return
        for n in range(count):
            if not tie or n == 0:
                db.position += 1
            event_id = f"e{self.next_event}"
            self.next_event += 1
            self.written.append(event_id)
            bad = poison and n == 0
            if bad:
                self.poisoned.add(event_id)
            key = keys[n % len(keys)]
            pos = (db.position, db.position)
            origin = db.identity if db.headers else None
            if origin is None:
                self.legacy.setdefault(db.name, db.identity)
            self.publish(db, Record(0, key, event_id, db.name, pos, origin, bad))

    def resend(self, db_index: int, back: int) -> None:
        """The connector resumes ``back`` records early (at-least-once): sent again. Known
        limit: not by a restored database until its new history passed the old top (a stop on
        such a re-send resumed with --as-resends floors the new history's next events)."""
        db = self.databases[db_index % len(self.databases)]
        if not self.histories_passed():
            return
        origin = db.identity if db.headers else None  # the header is added as it is sent
        for old in db.published[-back:] if back else []:
            self.publish(db, replace(old, source=db.name, origin=origin))

    def rename(self, db_index: int, back: int) -> None:
        """`cdc apply --rename-source`: the same database under a new name, its tail re-sent."""
        db = self.databases[db_index % len(self.databases)]
        db.name = db.name + "'"
        self.resend(db_index, back)

    def identity_headers_on(self) -> None:
        """The connectors start writing their databases' identities (an upgrade)."""
        for db in self.databases:
            db.headers = True

    def headers_on(self) -> bool:
        """Every connector writes its identity, and every partition learnt the database of the
        positions it stored without one (the upgrade's end: the runbook's condition for a
        rename or a second database under a name; before it, only the window knows them)."""
        return (
            all(db.headers for db in self.databases)
            and not any(
                "@" not in key and key not in row.identities
                for row in self.rows.values()
                for key in row.sources
            )
            and not any(
                r.origin is None and r.offset > self.rows[p].watermark
                for p, log in self.logs.items()
                for r in log
            )
        )

    def second_database(self) -> None:
        """Another database left on the first one's name (its own identity and WAL)."""
        if len(self.databases) < 3:
            n = len(self.databases)
            self.databases.append(Database("db", f"sys{n + 1}/app", position=50 + n))

    def restore(self, db_index: int, back: int) -> None:
        """The database restored from a physical backup (the same identity): its WAL goes on
        from ``back`` positions earlier, the events after the backup gone from it (not from
        Kafka). Its connector keeps publishing under the same name and identity. Known limit:
        the consumer has read what the connector published before (else the old history's
        unread tail and the new one interleave under one source, and the partition stops
        again after each)."""
        db = self.databases[db_index % len(self.databases)]
        if not self.settled():
            return  # known limit: a stop resolved after it (--as-resends) floors its new events
        if not self.histories_passed() or any(
            (state.lost is not None or state.pending) and row.identities.get(key) == db.identity
            for row in self.rows.values()
            for key, state in row.sources.items()
        ):
            return  # one restore at a time: the next once its new history passed the old top
        if any(
            (state.floor is not None or row.identity != self.identity())
            and row.identities.get(key) == db.identity
            for row in self.rows.values()
            for key, state in row.sources.items()
        ):
            return  # known limit: a restore while a partition re-reads (or is to) the database
        tops = [
            state.top[0]
            for row in self.rows.values()
            for key, state in row.sources.items()
            if row.identities.get(key) == db.identity
        ]
        self.old_tops[db.identity] = max([*tops, db.position])
        db.position = max(db.position - back, 0)
        self.forks[db.identity] = db.position
        db.published = [r for r in db.published if r.position[0] <= db.position]
        # Its first new event is read before the topic moves (known limit: a floor laid by a
        # start-over between a restore and its new events would take them for re-reads)
        self.write(db_index, 1, ["a"], tie=False, poison=False)
        self.drain()

    # -- Kafka --------------------------------------------------------------------------------
    def identity(self) -> TopicIdentity:
        return TopicIdentity(f"c{self.cluster}", f"t{self.incarnation}")

    def mirror(self, shift: int) -> None:
        """A failover to a mirror on another cluster: every retained record at other offsets."""
        if not self.histories_passed():
            return
        before = self.identity()
        self.incarnation += 1
        self.cluster += 1
        for p, log in self.logs.items():
            row = self.rows[p]
            current = row.identity is None or row.identity == before
            self.decided_prefix[p] = sum(1 for r in log if r.offset <= row.watermark and current)
            self.logs[p] = [replace(r, offset=n + shift) for n, r in enumerate(log)]
            self.cursors[p] = 0
        for db in self.databases:
            db.published = []

    def settled(self) -> bool:
        """Every partition drained and its stops resolved (what an operator does before moving
        a topic); False when one stays stopped."""
        self.drain()
        if not all(self.resolve(p) for p in self.rows):
            return False
        self.drain()
        return not any(row.stopped for row in self.rows.values())

    def histories_passed(self) -> bool:
        """True when every partition that holds a restored database's lost history above its
        fork has read the new one past it (resumed with --new-history, or above the old top).
        Known limits before that: a topic
        move (a failover to a mirror, a re-created topic, added partitions) lays floors at the
        old top where a partition holds it, and takes the new history's events below it for
        re-reads; a rewind past a lost history's marker the window forgot; a re-send of the
        restored database's records resumed with --as-resends floors the new history's next
        events below the old top."""
        return all(
            state.top[0] <= self.forks[identity]
            or state.top[0] > self.old_tops[identity]
            or state.lost is not None
            for row in self.rows.values()
            for key, state in row.sources.items()
            for identity in [row.identities.get(key)]
            if identity in self.old_tops
        )

    def recreate(self) -> None:
        """The topic deleted (drained first, its stops resolved) and created again, empty."""
        if not self.histories_passed() or not self.settled():
            return
        self.incarnation += 1
        self.logs = {p: [] for p in range(self.partitions)}
        self.cursors = {p: 0 for p in range(self.partitions)}
        self.decided_prefix = {}  # nothing of an empty topic was decided
        for db in self.databases:
            db.published = []
        self.restarted_on_new_topic()

    def restarted_on_new_topic(self) -> None:
        """The consumer driver, its query refused on the moved topic, restarts and starts over
        the partitions whose sources' positions can judge the new topic's records
        (`inbox.moves.Move.automatic`), before it reads any."""
        for row in self.rows.values():
            moved = judge_identity(row.identity, self.identity(), row.positions_view())
            if moved is not None and moved.rebased and not row.stopped:
                self.start_over(row, -1, by_operator=False)

    def add_partition(self) -> None:
        """`outboxkit cdc add-partitions`: connectors paused, the consumer caught up, every
        partition's sources raised (`inbox.moves.raised_rows`), then one partition more."""
        if not self.histories_passed() or not self.settled():
            return
        names = {db.name for db in self.databases}
        rows = [(row.sources, row.identities) for row in self.rows.values()]
        after = moves.raised_rows(rows, names, {db.identity for db in self.databases}, 1)
        for row, (states, identities) in zip(self.rows.values(), after, strict=False):
            row.sources, row.identities = dict(states), dict(identities)
        new = self.partitions
        self.partitions += 1
        self.logs[new] = []
        self.cursors[new] = 0
        states, identities = after[-1]
        self.rows[new] = Row(
            sources=dict(states), identities=dict(identities), identity=self.identity()
        )

    # -- the reader and the inbox --------------------------------------------------------------
    def read(self, p: int, size: int) -> None:
        """One micro-batch of ``size`` records of partition ``p`` from the reader's cursor."""
        row = self.rows[p]
        chunk = [r for r in self.logs[p] if r.offset >= self.cursors[p]][:size]
        if not chunk:
            return
        if self.transaction(p, chunk):
            self.cursors[p] = chunk[-1].offset + 1
        elif not row.stopped:
            self.cursors[p] = row.watermark + 1 if row.watermark >= 0 else 0

    def replay(self, p: int, back: int) -> None:
        """Spark reads a batch again (a retried task, a restart from an older checkpoint)."""
        self.cursors[p] = max(0, self.cursors[p] - back)

    def resumed_at(self, p: int) -> int:
        """Where the reader of a resumed partition reads from: its watermark's next offset, or
        the start of a topic that moved meanwhile (the driver starts it over there)."""
        row = self.rows[p]
        moved = row.identity is not None and row.identity != self.identity()
        return 0 if moved else row.watermark + 1

    def restart(self) -> None:
        """The consumer lost its checkpoint: it starts from the inbox's watermarks."""
        for p in self.rows:  # a moved topic is read from its start
            self.cursors[p] = self.resumed_at(p)

    def drain(self) -> None:
        for _ in range(500):
            before = self._progress()
            for p in self.rows:
                self.read(p, 7)
            if before == self._progress():
                return

    def _progress(self) -> tuple[object, ...]:
        """What a read moves: the cursors, and the rows' start-overs (a start-over reads no
        record, its cursor may stay at 0)."""
        return (dict(self.cursors), [row.epoch for row in self.rows.values()])

    def transaction(self, p: int, records: list[Record]) -> bool:
        """`Inbox._transaction` over the model's rows: True when the slice was taken."""
        row = self.rows[p]
        if row.stopped:
            return False
        moved = judge_identity(row.identity, self.identity(), row.positions_view())
        if moved is not None:
            if moved.rebased:  # the consumer driver starts it over (`moves.start_over`)
                self.start_over(row, -1, by_operator=False)
                self.cursors[p] = 0
            else:
                row.stopped = moved.reason
            return False
        mark = row.watermark
        seen, row_identities = source_keys(((r.source, r.origin) for r in records), row.identities)
        keyed = [replace(r, source=k) for r, k in zip(records, seen, strict=True)]
        r_of = {id(k): r for k, r in zip(keyed, records, strict=True)}
        first_seen: dict[str, tuple[int, int] | None] = {}
        for r in keyed:
            first_seen.setdefault(r.source, r.position)
        claimed = judgement.claimed_below(row.sources, row.identities, row_identities, first_seen)
        if claimed is not None:  # `inbox.apply.check_claims`
            row.stopped = stops.unclaimed(claimed, row_identities[claimed])
            return False
        asked = {
            r.event_id
            for r in keyed
            if asks_window(row.sources, mark, r.offset, r.source, r.position)
        }
        below = {
            r.event_id
            for r in keyed
            if r.offset > mark
            and r.source in row.sources
            and r.position <= row.sources[r.source].top
        }
        decided = (asked | below) & ({r.event_id for r in row.parked} | self.skipped)
        view = PartitionView(
            watermark=mark,
            recent_ids=frozenset(asked & set(row.window.values())),
            parked_keys=frozenset(r.key for r in row.parked),
            sources=row.sources,
            held={o: e for o, e in row.window.items() if 0 <= o <= mark},
            by_position=row.by_position,
            ids_kept=self.window > 0,
            parked_ids=frozenset(decided),
            replay_ids=row.replay_ids,
        )
        decider = Decider(view)
        verdicts = []
        for r in keyed:
            incoming = Incoming(r.offset, r.key, r.event_id, "T", None, None, r.source, r.position)
            decision = decider.decide(incoming)
            if decision.action is Action.APPLY and r.poison and r.event_id in self.poisoned:
                decider.parked(incoming)  # the handler kept failing: parked
                decision = replace(decision, action=Action.PARK)
            verdicts.append((r, decision))
            if decision.action is Action.STOP:
                row.stopped, row.stopped_on = decision.reason, r.event_id
                if self.logs[p].index(r_of[id(r)]) < self.decided_prefix.get(p, 0):
                    self.needless.append(r.event_id)  # a re-read the start-over should skip
                return False
        for r, decision in verdicts:
            if decision.action is Action.APPLY:
                self.apply(r.event_id)
                if r.offset > mark:
                    row.window[r.offset] = r.event_id
            elif decision.action in (Action.PARK, Action.HOLD):
                row.parked.append(r)
            row.watermark = max(row.watermark, r.offset)
        row.sources = judgement.advanced(
            row.sources,
            (
                (r.source, r.position, r.event_id)
                for r in keyed
                if r.offset > mark or r.source in row.sources
            ),
        )
        row.replay_ids = row.replay_ids - {r.event_id for r in keyed if r.offset > mark}
        row.identities = row_identities
        row.identity = self.identity()
        floor = prune_floor(row.watermark, self.window) if self.window else None
        row.window = {o: e for o, e in row.window.items() if floor is not None and o >= floor}
        return True

    def apply(self, event_id: str) -> None:
        self.applied[event_id] += 1
        if self.applied[event_id] > 1:
            self.twice.append(event_id)

    # -- the operator --------------------------------------------------------------------------
    def start_over(self, row: Row, offset: int, *, by_operator: bool) -> None:
        """`inbox.moves.start_over` on the model's row."""
        recreated = moves.recreated(row.identity, self.identity())
        row.watermark = offset
        row.identity = self.identity()
        row.stopped = None
        row.by_position = bool(row.sources) and not by_operator
        row.sources = judgement.started_over(row.sources, recreated=recreated)
        row.epoch += 1
        if row.window:  # `moves.keep_ids_below_offsets`
            low, high = min(row.window), max(row.window)
            shift = max(high + 2, high - low + 1)
            row.window = {o - shift: e for o, e in row.window.items()}

    def rewind(self, p: int, back: int) -> None:
        """`outboxkit inbox rewind`: the events the window holds above the new watermark are
        applied again on purpose (the oracle forgets that they were)."""
        row = self.rows[p]
        if row.stopped or row.watermark < 0 or row.identity != self.identity():
            return  # a live partition's own offsets
        if not self.histories_passed():
            return  # known limit: a rewind past a lost history's marker the window forgot
        offset = max(-1, row.watermark - back)
        again = {e for o, e in row.window.items() if o > offset}  # `operations.applied_above`
        for event_id in again:  # applied again on purpose
            self.applied[event_id] -= 1
        row.replay_ids = row.replay_ids | again
        row.sources = judgement.rewound(row.sources, row.replay_ids)
        row.watermark = offset
        row.by_position = False
        row.epoch += 1
        row.window = {o: e for o, e in row.window.items() if o <= offset}
        self.cursors[p] = offset + 1
        # From here the partition re-reads by the operator's choice, not the failover's: a
        # record below what the window holds may stop it (the rewind's own limit).
        self.decided_prefix.pop(p, None)

    def redrive(self, p: int) -> None:
        """`outboxkit inbox redrive` once the handler is fixed: every parked record of the
        partition applied in key order unless the window says it was applied."""
        row = self.rows[p]
        for r in list(row.parked):
            self.poisoned.discard(r.event_id)
            row.parked.remove(r)
            if r.event_id not in set(row.window.values()):
                self.apply(r.event_id)
                row.window[min(row.window, default=0) - 1] = r.event_id

    def skip(self, p: int) -> None:
        """`outboxkit inbox skip` of a partition's first parked record: given up on purpose."""
        row = self.rows[p]
        if row.parked:
            first = row.parked.pop(0)
            self.skipped.add(first.event_id)

    def claim(self, p: int, move: moves.Move, key: str, writer: str) -> bool:
        """`outboxkit inbox rebase --source-identity KEY=WRITER` on partition ``p``."""
        row = self.rows[p]
        how = transitions.Rebase(claims={key: writer})
        assert transitions.refusal(move, how) is None
        row.identities = {**row.identities, **how.claims}
        row.stopped = None
        row.epoch += 1
        self.cursors[p] = self.resumed_at(p)
        return True

    def _origin_of(self, p: int, event_id: str | None) -> str | None:
        """The database identity of the record the partition stopped on (what the operator
        reads from its headers)."""
        found = [r.origin for r in self.logs[p] if r.event_id == event_id]
        return found[-1] if found else None

    def resolve(self, p: int) -> bool:
        """The runbook's path for the partition's stop, as an operator who looked at the
        stopping record takes it: its event applied already, a re-send; else, its database was
        restored, a new history from the fork."""
        row = self.rows[p]
        if not row.stopped:
            return True
        move = moves.Move(
            "c",
            "t",
            p,
            row.watermark,
            row.identity,
            self.identity(),
            row.positions_view(),
            row.stopped,
        )
        stopped_on, row.stopped_on = row.stopped_on, None
        if stops.GONE_BACK in row.stopped:
            assert (
                transitions.refusal(move, transitions.Rebase()) is not None
            )  # a plain rebase is refused
            parked = {r.event_id for other in self.rows.values() for r in other.parked}
            known = stopped_on is not None and self.applied[stopped_on] > 0
            known = known or stopped_on in self.skipped or stopped_on in parked
            key = stops.stopped_source(row.stopped)
            origin = row.identities.get(key or "") or self._origin_of(p, stopped_on)
            histories = (
                {key: self.forks[origin]} if key and origin in self.forks and not known else {}
            )
            writer = self.legacy.get(key or "")
            if not known and not histories and key not in row.identities and writer:
                return self.claim(p, move, key, writer)  # two databases, one without identity
            if not known and not histories:
                return False  # nothing explains the stop: the model found a hole
            how = transitions.Rebase(resends=not histories, histories=histories)
            assert transitions.refusal(move, how) is None
            row.sources = transitions.resumed(row.sources, row.stopped, how)
            row.stopped = None
            row.epoch += 1
            self.cursors[p] = self.resumed_at(p)
            return True
        if stops.UNCLAIMED in row.stopped:  # the operator knows who wrote them unnamed
            assert transitions.refusal(move, transitions.Rebase()) is not None
            key = stops.stopped_source(row.stopped)
            assert key is not None and key in self.legacy, row.stopped
            return self.claim(p, move, key, self.legacy[key])
        # offsets changed meaning, or a record no known source judges after a start-over: the
        # operator vouches for the offsets above the watermark
        assert transitions.refusal(move, transitions.Rebase(offset=row.watermark)) is None
        self.start_over(row, row.watermark, by_operator=True)
        row.identity = self.identity()
        self.cursors[p] = row.watermark + 1
        return True
