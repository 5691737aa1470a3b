#!/bin/sh
# Apache Kafka, one KRaft node of three (each broker + controller), every listener SASL,
# StandardAuthorizer. docker-compose.yml runs it as kafka-1, kafka-2 and kafka-3.
#
# Properties come from KAFKA_CFG_* variables (KAFKA_CFG_MESSAGE_MAX_BYTES -> message.max.bytes);
# the JAAS lines, which carry the admin password, are added here from the mounted secret, into a
# file only this container's user can read. Listeners of node N:
#   CONTROLLER kafka-N:9093    the quorum's Raft traffic, SASL/PLAIN as admin (KRaft
#                              controllers take no SCRAM)
#   BROKER     kafka-N:9091    inter-broker replication, SCRAM-SHA-512 as admin
#   CLIENT     kafka-N:9092    every client on the compose network, SCRAM-SHA-512
#   EXTERNAL   localhost:909x  operators on the host (published on 127.0.0.1), SCRAM-SHA-512
# SCRAM users other than admin and the ACLs are created by kafka-init (init.sh), not here.
set -eu
umask 077

: "${KAFKA_CLUSTER_ID:?set KAFKA_CLUSTER_ID (deploy/make-secrets.sh writes it into deploy/.env)}"
admin_password="$(cat /run/secrets/kafka-admin.password)"
conf=/tmp/outboxkit-kafka
mkdir -p "$conf"
props="$conf/server.properties"

env | sed -n 's/^KAFKA_CFG_\([A-Z0-9_]*\)=\(.*\)$/\1 \2/p' | while read -r name value; do
  printf '%s=%s\n' "$(printf '%s' "$name" | tr 'A-Z_' 'a-z.')" "$value"
done >"$props"

plain='org.apache.kafka.common.security.plain.PlainLoginModule required'
scram='org.apache.kafka.common.security.scram.ScramLoginModule required'
cat >>"$props" <<PROPS
listener.name.controller.plain.sasl.jaas.config=$plain username="admin" password="$admin_password" user_admin="$admin_password";
listener.name.broker.scram-sha-512.sasl.jaas.config=$scram username="admin" password="$admin_password";
listener.name.client.scram-sha-512.sasl.jaas.config=$scram;
listener.name.external.scram-sha-512.sasl.jaas.config=$scram;
PROPS

# The admin client's settings, for the health check and for operators (docker compose exec).
cat >"$conf/admin.properties" <<PROPS
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=$scram username="admin" password="$admin_password";
PROPS

data="$(sed -n 's/^log\.dirs=//p' "$props")"
if [ ! -f "$data/meta.properties" ]; then
  # Each node formats its own log directory once, with the cluster id all three share (the
  # quorum is the static controller.quorum.voters). KIP-900: the inter-broker user's SCRAM
  # credential must exist before the broker can start.
  /opt/kafka/bin/kafka-storage.sh format --config "$props" --cluster-id "$KAFKA_CLUSTER_ID" \
    --add-scram "SCRAM-SHA-512=[name=admin,password=$admin_password]"
fi
exec /opt/kafka/bin/kafka-server-start.sh "$props"
