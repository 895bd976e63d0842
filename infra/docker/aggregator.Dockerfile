# rewardbus-aggregator: the learner-side stream aggregator (and the `rewardbus` CLI for
# topics and the demo's trainer side). No sandbox, no toolchains, no privileges.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ENV REWARDBUS_CACHE=/tmp/rewardbus \
    PATH=/opt/rewardbus/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1
LABEL org.opencontainers.image.title="rewardbus-aggregator"
USER 65534:65534
ENTRYPOINT ["rewardbus"]
CMD ["aggregator"]
COPY payload /opt/rewardbus/payload
USER 0:0
RUN export DEBIAN_FRONTEND=noninteractive \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/rewardbus \
 && /opt/rewardbus/bin/pip install -q --no-index --no-compile --find-links /opt/rewardbus/payload/wheels rewardbus \
 && rm -rf /opt/rewardbus/payload /root/.cache
USER 65534:65534
