#!/bin/bash
cd /tmp/exp
for round in 1 2; do
  for v in t025 t01 t025c1; do
    case $v in
      t025) EXP_TRIGGER=0.25 PYTHONPATH=/tmp/exp /work/main/.venv/bin/python /tmp/idle/ab.py $v 10,50 ;;
      t01) EXP_TRIGGER=0.1 PYTHONPATH=/tmp/exp /work/main/.venv/bin/python /tmp/idle/ab.py $v 10,50 ;;
      t025c1) JAVA_TOOL_OPTIONS=-XX:TieredStopAtLevel=1 EXP_TRIGGER=0.25 PYTHONPATH=/tmp/exp /work/main/.venv/bin/python /tmp/idle/ab.py $v 10,50 ;;
    esac 2>&1 | grep -v "^\[bench\]" >> /tmp/idle/variants3-r$round.log
  done
done
echo done >> /tmp/idle/variants3-r2.log
