"""The window's lookup as two checkouts build it, alternating 40 times on one Postgres: 1,000
wanted ids (none, then 7, in the window) against a partition's full 10,000-id window, grown
first by `bench inbox`'s exactly-once variant. Usage, from the repository, with the before at
another path (e.g. `git worktree add /tmp/before <commit>`):
    python docs/bench/inbox-slice-at-once/lookup.py URL BEFORE_CHECKOUT
"""

import importlib.util
import statistics
import sys
import time
import uuid
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.dialects import postgresql

from outboxkit.bench import inbox as bench

HERE = Path(__file__).resolve().parents[3]
VARIANT = "inbox, exactly-once source (10,000 window), batch handler"


def lookup_sql(checkout: Path) -> str:
    path = checkout / "inbox" / "statements.py"
    spec = importlib.util.spec_from_file_location(f"statements_{abs(hash(path))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.RECENT.compile(dialect=postgresql.psycopg.dialect()))


def main() -> None:
    url, before = sys.argv[1], Path(sys.argv[2])
    engine = create_engine(url)
    bench.run_variant(engine, VARIANT, 44_000, 1000, lambda n: None)  # 11,000 per partition
    statements = {"before": lookup_sql(before), "after": lookup_sql(HERE)}
    with engine.connect() as conn:
        topic = conn.exec_driver_sql(
            "SELECT topic FROM inbox_recent WHERE consumer = 'bench-inbox' LIMIT 1"
        ).scalar()
        held = (
            conn.exec_driver_sql(
                "SELECT unnest(event_ids)::text FROM inbox_recent"
                " WHERE consumer = 'bench-inbox' AND partition = 0"
            )
            .scalars()
            .all()
        )
        driver = conn.connection.driver_connection
        assert driver is not None
        print(f"window: {len(held)} ids")
        print("| wanted in the window | before ms (median of 40) | after ms |")
        print("|---|---|---|")
        for hits in (0, 7):
            times: dict[str, list[float]] = {"before": [], "after": []}
            for _ in range(40):
                fresh = [str(uuid.uuid4()) for _ in range(1000 - hits)]
                wanted = sorted(fresh + held[len(held) - hits :])
                params = {
                    "p_consumer": "bench-inbox",
                    "p_topic": topic,
                    "p_partition": 0,
                    "p_wanted": ",".join(wanted),
                    "string_to_array_1": ",",
                }
                for label, sql in statements.items():
                    started = time.perf_counter()
                    rows = driver.execute(sql, params).fetchall()
                    times[label].append(time.perf_counter() - started)
                    assert len(rows) == hits, (label, len(rows), hits)
            before_ms, after_ms = (statistics.median(times[k]) * 1000 for k in ("before", "after"))
            print(f"| {hits} of 1,000 | {before_ms:.2f} | {after_ms:.2f} |")


if __name__ == "__main__":
    main()
