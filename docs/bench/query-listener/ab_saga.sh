#!/bin/bash
# Before and after alternated, in rounds, on one stack: BEFORE is a checkout of the parent
# commit (git worktree add $BEFORE HEAD~1). Usage: BEFORE=/tmp/before ab_saga.sh [ROUNDS]
here=$(cd "$(dirname "$0")" && pwd)
after=$(git -C "$here" rev-parse --show-toplevel)
for round in $(seq 1 "${1:-3}"); do
  for variant in before after; do
    if [ $variant = before ]; then root=$BEFORE; else root=$after; fi
    (cd "$root" && OUTBOXKIT_STACK_DIR="$after/.outboxkit/stack" PYTHONPATH="$root" \
      "$after/.venv/bin/python" "$here/ab.py" "$variant-$round") 2>&1 | grep -v "^\[" >> "$here/saga-ab.log"
  done
done
