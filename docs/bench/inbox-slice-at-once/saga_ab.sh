#!/bin/bash
# The saga before and after, alternated in rounds FIRST..ROUNDS (default 1..3) on one stack (the
# before first in odd rounds, second in even ones), with the query listeners' ab.py (bench saga's
# own functions): 30 s at 10 and at 50 orders/s, then a 100/s step. BEFORE is a checkout of the
# code before (git worktree add /tmp/before 9a83581); the log goes to LOG (default: saga-ab.log
# here), and saga_table.py turns it into saga-ab.md. The stack is left up: `outboxkit stack down`
# after. Before FIRST, ROUNDS and the alternating order, the before always ran first.
# Usage: BEFORE=/tmp/before [LOG=...] [FIRST=1] [ROUNDS=3] docs/bench/inbox-slice-at-once/saga_ab.sh
here=$(cd "$(dirname "$0")" && pwd)
after=$(git -C "$here" rev-parse --show-toplevel)
log=${LOG:-$here/saga-ab.log}
for round in $(seq "${FIRST:-1}" "${ROUNDS:-3}"); do
  # Which runs first alternates: the second of a pair runs on a stack the first has warmed.
  if [ $((round % 2)) -eq 1 ]; then pair="before after"; else pair="after before"; fi
  for variant in $pair; do
    if [ $variant = before ]; then root=$BEFORE; else root=$after; fi
    (cd "$root" && OUTBOXKIT_STACK_DIR="$after/.outboxkit/stack" PYTHONPATH="$root" \
      "$after/.venv/bin/python" "$after/docs/bench/query-listener/ab.py" "$variant-$round" 10,50 100) \
      2>&1 | grep -v "^\[" >> "$log"
  done
done
