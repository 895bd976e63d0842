# rewardbus-kafka: Apache Kafka (the project's Maven jars) in KRaft mode. One image serves
# a single combined node and each node of a multi-node quorum; the entrypoint writes
# server.properties from KAFKA_* variables (see kafka-entrypoint.sh).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="rewardbus-kafka"
EXPOSE 9092 9093
ENTRYPOINT ["/opt/kafka/kafka-entrypoint.sh"]
COPY payload /opt/kafka
RUN export DEBIAN_FRONTEND=noninteractive \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 1000 --home-dir /var/lib/kafka --create-home kafka
USER kafka
