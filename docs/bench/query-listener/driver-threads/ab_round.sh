#!/bin/bash
# One variant on a running saga (`outboxkit saga up`): restart the consumer driver (the code in
# the checkout), POST 10 orders/s for 120 s, and measure the driver's threads' CPU from 40 s to
# 100 s (threads.py); keep the last 150 batches' progress lines. Before: `git stash` or a checkout
# of the parent commit; after: the change. Usage: ab_round.sh LABEL
label=$1
here=$(cd "$(dirname "$0")" && pwd)
cd "$(git -C "$here" rev-parse --show-toplevel)"
.venv/bin/outboxkit saga restart consumers > /dev/null 2>&1
sleep 20
status=$(.venv/bin/outboxkit saga status --json)
pid=$(echo "$status" | python3 -c "import json,sys; print([p['pid'] for p in json.load(sys.stdin) if p['name']=='consumers'][0])")
orders=$(echo "$status" | python3 -c "import json,sys; print([p['url'] for p in json.load(sys.stdin) if p['name']=='orders'][0])")
.venv/bin/python "$here/load.py" "$orders" 1200 10 > "$here/load-$label.log" 2>&1 &
sleep 40
python3 "$here/threads.py" "$pid" 60 > "$here/threads-$label.txt"
wait
grep -h "rows, ms" .outboxkit/stack/saga/consumers.log | tail -150 > "$here/progress-$label.log"
echo "$label: $(head -1 "$here/threads-$label.txt")"
