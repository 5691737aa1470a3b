"""The outbox write's client CPU alone, cursor per publish (before) against the connection's
cursor (after), alternating in one process: `Outbox.publish` in delete mode, 2,000 events per
measurement in one transaction (rolled back), on any Postgres with the migrations applied.
    python docs/bench/outbox-cursor/micro.py URL [--rounds 10]
Prints client CPU µs per publish, min / median / max over the rounds, after/before."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from outbox import Outbox, statements
from outboxkit.bench.ab import alternate
from outboxkit.bench.report import spread_cells

EVENTS = 2000


def execute_before(session: Session, todo: Sequence[statements.Statement], **_: object) -> None:
    """`outbox.statements._execute` as it was: a new cursor for every publish."""
    session.flush()
    driver = session.connection().connection.driver_connection
    with statements.as_sqlalchemy_errors(todo[0]), driver.cursor() as cursor:
        for sql, params in todo:
            cursor.execute(sql, params)


def measure(engine, label: str) -> float:
    outbox = Outbox("delete")
    original = statements._execute
    if label == "before":
        statements._execute = execute_before
    try:
        with Session(engine) as session, session.begin():
            session.connection()
            started = time.process_time()
            for n in range(EVENTS):
                outbox.publish(
                    session,
                    aggregate_type="order",
                    aggregate_id=f"order-{n}",
                    event_type="OrderPlaced",
                    payload={"id": n, "items": [{"sku": "widget", "qty": 2}]},
                )
            spent = time.process_time() - started
            session.rollback()
    finally:
        statements._execute = original
    return spent / EVENTS * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    engine = create_engine(args.url)
    measure(engine, "after")  # warm: prepared statements, imports
    found = alternate(args.rounds, lambda label: measure(engine, label))
    print("| code | client CPU µs per publish, min / median / max |")
    print("|---|---|")
    for label, values in found.items():
        print(f"| {label} | {' / '.join(spread_cells(values, '.0f'))} |")
    ratio = statistics.median(found["after"]) / statistics.median(found["before"])
    print(f"\nafter/before (medians): {ratio:.2f}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
