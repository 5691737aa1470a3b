#!/bin/bash
# One variant on a running saga (`outboxkit saga up`): restart the consumer driver (the code in
# the checkout), POST RATE orders/s (default 10) for 120 s, and measure the driver's threads'
# CPU from 40 s to 100 s (threads.py); keep the last 150 batches' progress lines. Before: `git stash` or a checkout
# of the parent commit; after: the change. Usage: ab_round.sh LABEL [OUT_DIR]
label=$1
rate=${RATE:-10}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${2:-$here}" && cd "${2:-$here}" && pwd)
cd "$(git -C "$here" rev-parse --show-toplevel)"
.venv/bin/outboxkit saga restart consumers > /dev/null 2>&1
sleep 20
status=$(.venv/bin/outboxkit saga status --json)
pid=$(echo "$status" | python3 -c "import json,sys; print([p['pid'] for p in json.load(sys.stdin) if p['name']=='consumers'][0])")
orders=$(echo "$status" | python3 -c "import json,sys; print([p['url'] for p in json.load(sys.stdin) if p['name']=='orders'][0])")
.venv/bin/python "$here/load.py" "$orders" $((120 * rate)) "$rate" > "$out/load-$label.log" 2>&1 &
sleep 40
python3 "$here/threads.py" "$pid" 60 > "$out/threads-$label.txt"
wait
grep -h "rows, ms" .outboxkit/stack/saga/consumers.log | tail -150 > "$out/progress-$label.log"
echo "$label: $(head -1 "$out/threads-$label.txt")"
