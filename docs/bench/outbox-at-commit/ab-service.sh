#!/bin/bash
# `outboxkit bench service` from two checkouts, alternating, twice: the orders service alone on
# the local stack (which each run starts and stops). Usage, from the repository:
#   docs/bench/outbox-at-commit/ab-service.sh BEFORE_CHECKOUT OUT_DIR
# (e.g. `git worktree add /tmp/ab-before <commit>`). Writes OUT_DIR/service-{before,after}-{1,2}.
set -euo pipefail
before=$(cd "$1" && pwd); after=$(pwd); out=$2; mkdir -p "$out"
for i in 1 2; do
  for v in before after; do
    d=$after; [ "$v" = before ] && d=$before
    echo "service $v $i" >&2
    (cd "$d" && PYTHONPATH=$d "$after/.venv/bin/python" -m outboxkit.cli bench service --reps 3 \
      --out "$out/service-$v-$i" > "$out/service-$v-$i.log" 2>&1)
  done
done
