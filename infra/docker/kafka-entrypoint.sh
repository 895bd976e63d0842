#!/bin/sh
# Write server.properties from KAFKA_* variables, format the log directory once,
# then exec the broker (PID 1 of the container, so `docker stop` reaches it).
#
#   KAFKA_NODE_ID                  node.id (default 1)
#   KAFKA_CONTROLLER_QUORUM_VOTERS controller.quorum.voters (default <id>@localhost:9093:
#                                  a single combined node); a cluster lists every node
#   KAFKA_ADVERTISED_LISTENERS     default PLAINTEXT://<container ip>:9092, which both
#                                  the Docker host and other containers on the network reach
#   KAFKA_LISTENERS                default PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093
#   KAFKA_LISTENER_SECURITY_PROTOCOL_MAP  default PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
#   KAFKA_REPLICATION_FACTOR       default and internal topics (default 1)
#   KAFKA_MIN_INSYNC_REPLICAS      default 1
#   KAFKA_CLUSTER_ID               every node of a cluster must share it
#   KAFKA_HEAP                     -Xmx (default 512m)
#   KAFKA_CFG_<NAME>               any other property: KAFKA_CFG_LOG_RETENTION_MS -> log.retention.ms
set -eu
data=/var/lib/kafka/data
conf=/var/lib/kafka/server.properties
id=${KAFKA_NODE_ID:-1}
ip=$(hostname -i | cut -d' ' -f1)
rf=${KAFKA_REPLICATION_FACTOR:-1}
isr=${KAFKA_MIN_INSYNC_REPLICAS:-1}
cat >"$conf" <<PROPS
process.roles=broker,controller
node.id=$id
controller.quorum.voters=${KAFKA_CONTROLLER_QUORUM_VOTERS:-$id@localhost:9093}
listeners=${KAFKA_LISTENERS:-PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093}
advertised.listeners=${KAFKA_ADVERTISED_LISTENERS:-PLAINTEXT://$ip:9092}
listener.security.protocol.map=${KAFKA_LISTENER_SECURITY_PROTOCOL_MAP:-PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT}
controller.listener.names=CONTROLLER
inter.broker.listener.name=${KAFKA_INTER_BROKER_LISTENER_NAME:-PLAINTEXT}
log.dirs=$data
num.partitions=${KAFKA_NUM_PARTITIONS:-4}
auto.create.topics.enable=true
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
share.coordinator.state.topic.num.partitions=4
group.initial.rebalance.delay.ms=0
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=6000
log.cleaner.enable=true
log.cleaner.dedupe.buffer.size=16777216
num.network.threads=2
num.io.threads=4
PROPS
# KAFKA_CFG_FOO_BAR=1 -> foo.bar=1 (a later line wins over the defaults above).
env | sed -n 's/^KAFKA_CFG_\([A-Z0-9_]*\)=\(.*\)$/\1=\2/p' | while IFS='=' read -r name value; do
  printf '%s=%s\n' "$(printf '%s' "$name" | tr 'A-Z_' 'a-z.')" "$value"
done >>"$conf"
java_opts="-Xmx${KAFKA_HEAP:-512m} -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true -Dlog4j2.disable.jmx=true -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties"
if [ ! -f "$data/meta.properties" ]; then
  # shellcheck disable=SC2086 # java_opts is a list of flags
  java $java_opts -cp '/opt/kafka/lib/*' kafka.tools.StorageTool format \
    -t "${KAFKA_CLUSTER_ID:-MkU3OEVBNTcwNTJENDM2Qg}" -c "$conf" --ignore-formatted
fi
echo "rewardbus-kafka: node $id starting; advertised $(sed -n 's/^advertised.listeners=//p' "$conf")"
# shellcheck disable=SC2086
exec java $java_opts -cp '/opt/kafka/lib/*' kafka.Kafka "$conf"
