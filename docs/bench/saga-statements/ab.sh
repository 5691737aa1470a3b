#!/bin/bash
# Before (the parent commit's saga/) and after alternated in two rounds on a running saga
# (`outboxkit saga up`), each at 50 orders/s (ab_round.sh of ../query-listener/driver-threads).
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" || exit 1
out=docs/bench/saga-statements/driver-threads
for round in 1 2; do
  git checkout 233aab2 -- saga  # the parent commit
  RATE=50 docs/bench/query-listener/driver-threads/ab_round.sh "before-$round" $out
  git checkout HEAD -- saga
  RATE=50 docs/bench/query-listener/driver-threads/ab_round.sh "after-$round" $out
done
