#!/bin/bash
for i in 1 2; do
  for v in before after; do
    d=/tmp/run1; [ $v = after ] && d=/tmp/run2
    (cd $d && PYTHONPATH=$d /work/main/.venv/bin/python -m outboxkit.cli bench service --reps 3 --out /tmp/svc-$v-$i > /tmp/svc-$v-$i.log 2>&1)
  done
done
echo done > /tmp/svc-ab.done
