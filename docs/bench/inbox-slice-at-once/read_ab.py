"""`outbox.wire.record.read` of 1,000 records, its payload parsed by `json.loads` or by
`parse_json`, alternating 30 times in one process (CPU time of the thread). Usage, from the
repository: python docs/bench/inbox-slice-at-once/read_ab.py"""

import json
import statistics
import time

import outbox.wire.record as R
from outbox.envelope import Envelope
from outbox.wire.record import encode, read


def records(payload):
    return [
        encode(
            Envelope(
                aggregate_type="bench",
                aggregate_id=f"k{i % 64}",
                event_type="Tick",
                payload={**payload, "n": i},
            ),
            offset=i,
            timestamp_ms=1_700_000_000_000 + i,
        )
        for i in range(1000)
    ]


small = records({"note": "benchmark"})
order = records(
    {
        "order_id": "3f1c2a9e-8d7b-4c1e-9a55-1b2c3d4e5f60",
        "customer": "c-1234",
        "amount": "42.50",
        "currency": "EUR",
        "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
    }
)
parse = R.parse_json
out = {}
for name, recs in (("30-byte payload", small), ("saga-like 180-byte payload", order)):
    res = {"json.loads": [], "parse_json": []}
    for r in range(30):
        for label, f in (
            (("json.loads", json.loads), ("parse_json", parse))
            if r % 2
            else (("parse_json", parse), ("json.loads", json.loads))
        ):
            R.parse_json = f
            t0 = time.thread_time()
            [read(x) for x in recs]
            res[label].append((time.thread_time() - t0) * 1000)
    a, b = statistics.median(res["json.loads"]), statistics.median(res["parse_json"])
    print(f"| {name} ({len(recs[0].value)} bytes) | {a:.2f} | {b:.2f} | {b / a:.2f} |")
R.parse_json = parse
