cd /work/main
for i in 1 2; do for p in 2 4; do
  rm -rf /tmp/evlog-$p-$i; mkdir -p /tmp/evlog-$p-$i
  EXP_PARTITIONS=$p PYSPARK_SUBMIT_ARGS="--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file:///tmp/evlog-$p-$i --conf spark.eventLog.compress=false pyspark-shell" ./dev.sh bench saga --rates 10 --steps 25 --step-seconds 20 --duration 60 --out /tmp/abp-$p-$i > /tmp/abp-$p-$i.log 2>&1
  echo "done $p $i $(date)"
done; done
