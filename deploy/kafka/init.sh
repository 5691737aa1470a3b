#!/bin/sh
# kafka-init: the SCRAM users of every client principal (passwords from the mounted secrets;
# re-running updates them), their ACLs, and the outbox topics. Idempotent; runs once per
# `docker compose up`.
#
# Principals: connect (Debezium's worker: the only writer of the outbox topics), setup
# (`outboxkit dev saga prepare`: creates the topics), one per service (orders, payments,
# shipping: its HTTP process and its Spark consumer job read only the topics that job consumes),
# and console (`outboxkit console`: reads the outbox topics, writes nothing).
set -eu
umask 077

: "${TOPIC_PREFIX:?}" "${CONNECT_GROUP_ID:?}" "${CONNECT_TOPICS_PREFIX:?}"
: "${TOPIC_REPLICATION_FACTOR:?}" "${KAFKA_BOOTSTRAP:?}"
bootstrap="$KAFKA_BOOTSTRAP"
conf=/tmp/outboxkit-kafka-init
mkdir -p "$conf"
admin="$conf/admin.properties"
cat >"$admin" <<PROPS
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(cat /run/secrets/kafka-admin.password)";
PROPS

scram_user() {  # PRINCIPAL: create or update its SCRAM-SHA-512 credential
  printf 'SCRAM-SHA-512=[iterations=8192,password=%s]\n' \
    "$(cat "/run/secrets/kafka-$1.password")" >"$conf/$1.scram"
  /opt/kafka/bin/kafka-configs.sh --bootstrap-server "$bootstrap" --command-config "$admin" \
    --alter --entity-type users --entity-name "$1" --add-config-file "$conf/$1.scram"
  rm -f "$conf/$1.scram"
}

grant() {  # PRINCIPAL RESOURCE PATTERN NAME OPERATION...  (RESOURCE: topic, group,
  principal="$1" resource="$2" pattern="$3" name="$4"  # transactional-id or cluster)
  shift 4
  set -- $(for op in "$@"; do printf -- '--operation %s ' "$op"; done)
  if [ "$resource" = cluster ]; then
    target="--cluster"
  else
    target="--$resource $name --resource-pattern-type $pattern"
  fi
  # shellcheck disable=SC2086 # target and the operations are meant to split into words
  /opt/kafka/bin/kafka-acls.sh --bootstrap-server "$bootstrap" --command-config "$admin" \
    --add --allow-principal "User:$principal" $target "$@" >/dev/null
  echo "granted User:$principal $* on $resource $pattern $name"
}

for principal in connect setup orders payments shipping console; do
  scram_user "$principal"
done

# --- ACLs (tests/unit/test_deploy.py reads the `grant` lines below) -------------------------
# Connect: the outbox topics (and Debezium's heartbeat topics), its internal topics, its group,
# the transactional ids of exactly-once source (KIP-618: the leader's connect-cluster-<group>
# and <group>-<connector>-<task> for each task), idempotent writes.
grant connect topic prefixed "$TOPIC_PREFIX" Write Describe Create DescribeConfigs
grant connect topic prefixed __debezium-heartbeat. Write Describe Create DescribeConfigs
grant connect topic prefixed "$CONNECT_TOPICS_PREFIX" Read Write Describe Create DescribeConfigs
grant connect group literal "$CONNECT_GROUP_ID" Read Describe
grant connect transactional-id prefixed "$CONNECT_GROUP_ID" Write Describe
grant connect transactional-id literal "connect-cluster-$CONNECT_GROUP_ID" Write Describe
grant connect cluster literal kafka-cluster Describe DescribeConfigs IdempotentWrite

# Setup: creates the outbox topics (and reads their metadata); writes nothing.
grant setup topic prefixed "$TOPIC_PREFIX" Create Describe DescribeConfigs
grant setup cluster literal kafka-cluster Describe

# Each service reads the topics its saga job consumes (workshop/outboxkit_workshop/saga/jobs.py), nothing else, and has its
# own consumer groups (outboxkit-<service>...). Spark's Kafka source assigns partitions and never
# commits; its generated group ids (spark-kafka-source-...) are allowed until the jobs name
# their own. The inbox-lag metric's consumer (group outboxkit-metrics) only reads end offsets.
grant orders topic literal "${TOPIC_PREFIX}payment" Read Describe
grant orders topic literal "${TOPIC_PREFIX}shipment" Read Describe
grant orders topic literal "${TOPIC_PREFIX}timeout" Read Describe
grant payments topic literal "${TOPIC_PREFIX}order" Read Describe
grant payments topic literal "${TOPIC_PREFIX}shipment" Read Describe
grant shipping topic literal "${TOPIC_PREFIX}payment" Read Describe
for service in orders payments shipping; do
  grant "$service" group prefixed "outboxkit-$service" Read Describe
  grant "$service" group prefixed spark-kafka-source- Read Describe
  grant "$service" group literal outboxkit-metrics Describe
done

# The operator console: Kafka's end offsets of the outbox topics and, for a partition behind, its
# first record not applied yet (its timestamp: how long it has waited), and the topics' ids (a
# rebase). Describe on the topics: metadata, topic ids, list offsets; Read: fetch. Its consumers
# take partitions with assign() and commit nothing, so they join no group and need no Read on
# one; but librdkafka looks up the coordinator of the group.id a consumer is given
# (FindCoordinator: Describe on that group), the console's own and the lag reader's.
grant console topic prefixed "$TOPIC_PREFIX" Read Describe
grant console group literal outboxkit-console Describe
grant console group literal outboxkit-metrics Describe

# --- the outbox topics (tests/unit/test_deploy.py reads the `outbox_topic` lines) -----------
# Created here, before `setup` runs, with the cluster's replication factor; `outboxkit dev saga
# prepare` then finds them and creates none. The partitions are the brokers' num.partitions.
# A topic that exists with fewer replicas (e.g. from a single-broker deployment) stops the
# start: with min.insync.replicas=2 no acks=all write to it could succeed.
outbox_topic() {  # NAME
  /opt/kafka/bin/kafka-topics.sh --bootstrap-server "$bootstrap" --command-config "$admin" \
    --create --if-not-exists --topic "$1" --replication-factor "$TOPIC_REPLICATION_FACTOR"
  replicas="$(/opt/kafka/bin/kafka-topics.sh --bootstrap-server "$bootstrap" \
    --command-config "$admin" --describe --topic "$1" \
    | sed -n 's/.*ReplicationFactor: *\([0-9]*\).*/\1/p' | head -n 1)"
  if [ "${replicas:-0}" -lt "$TOPIC_REPLICATION_FACTOR" ]; then
    echo "kafka-init: $1 has $replicas replica(s), fewer than $TOPIC_REPLICATION_FACTOR;" \
      "reassign its partitions (kafka-reassign-partitions.sh) and start again" >&2
    exit 1
  fi
}
outbox_topic "${TOPIC_PREFIX}order"
outbox_topic "${TOPIC_PREFIX}payment"
outbox_topic "${TOPIC_PREFIX}shipment"
outbox_topic "${TOPIC_PREFIX}timeout"
echo "kafka-init: SCRAM users, ACLs and outbox topics in place"
