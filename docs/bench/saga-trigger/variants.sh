#!/bin/bash
# alternate the variants, two rounds
cd /tmp/exp
for round in 1 2; do
  for v in base shm async t025; do
    case $v in
      base) env PYTHONPATH=/tmp/exp /work/main/.venv/bin/python /tmp/idle/ab.py $v 10,50 ;;
      shm) EXP_DIR=/dev/shm PYTHONPATH=/tmp/exp /work/main/.venv/bin/python /tmp/idle/ab.py $v 10,50 ;;
      async) EXP_ASYNC=1 PYTHONPATH=/tmp/exp /work/main/.venv/bin/python /tmp/idle/ab.py $v 10,50 ;;
      t025) EXP_TRIGGER=0.25 PYTHONPATH=/tmp/exp /work/main/.venv/bin/python /tmp/idle/ab.py $v 10,50 ;;
    esac 2>&1 | grep -v "^\[bench\]" >> /tmp/idle/variants-r$round.log
  done
done
echo done >> /tmp/idle/variants-r2.log
