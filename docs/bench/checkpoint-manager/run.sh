cd /work/main
for i in 1 2; do for c in 1 0; do
  rm -rf /tmp/evck-$c-$i; mkdir -p /tmp/evck-$c-$i
  EXP_CK=$c PYSPARK_SUBMIT_ARGS="--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file:///tmp/evck-$c-$i --conf spark.eventLog.compress=false pyspark-shell" ./dev.sh bench saga --rates 10 --steps 25 --step-seconds 20 --duration 60 --out /tmp/abck-$c-$i > /tmp/abck-$c-$i.log 2>&1
  echo "done $c $i $(date)"
done; done
