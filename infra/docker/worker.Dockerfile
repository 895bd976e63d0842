# rewardbus-worker: one sandbox worker (a consumer-group member) and the language
# toolchains its jail runs. Built by `make images` (infra/docker/images.sh) on a
# local debootstrap base; with a registry, the default official base works unchanged.
#
# Metadata comes first and the two heavy steps last: on a vfs storage driver every
# instruction after the toolchain layer would copy the whole (~4 GB) root file system.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
# All twenty-two languages cost ~3.9 GB (and minutes per container start on a vfs engine);
# images.sh builds "python bash perl sql" unless WORKER_LANGUAGES says otherwise.
ARG LANGUAGES="python c cpp bash perl sql javascript java go rust typescript php ruby lua r racket d csharp kotlin scala haskell ocaml"
ENV REWARDBUS_CACHE=/var/cache/rewardbus \
    PATH=/opt/rewardbus/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1
LABEL org.opencontainers.image.title="rewardbus-worker" rewardbus.languages="${LANGUAGES}"
# Runs as root inside the container: the jail needs CAP_SYS_ADMIN (namespaces, mounts,
# pivot_root, a writable cgroup subtree) and drops every execution to uid 65534 with
# no capabilities. docs/containers.md lists the least privilege it needs.
ENTRYPOINT ["/opt/rewardbus/payload/worker-entrypoint.sh"]
CMD ["worker"]
COPY infra/docker/languages.sh /usr/local/sbin/rewardbus-languages
RUN /usr/local/sbin/rewardbus-languages ${LANGUAGES}
# Wheels are built outside (images.sh, with the host's pip and its certificates), so
# the image build needs no index access; so are the launcher and layer library
# (payload/bin, named by their C sources' hash: the installed package finds them).
COPY payload /opt/rewardbus/payload
RUN python3 -m venv /opt/rewardbus \
 && /opt/rewardbus/bin/pip install -q --no-index --no-compile --find-links /opt/rewardbus/payload/wheels rewardbus \
 && rm -rf /opt/rewardbus/payload/wheels /root/.cache \
 && mkdir -p /var/cache/rewardbus && mv /opt/rewardbus/payload/bin /var/cache/rewardbus/bin \
 && if [ -d /opt/rewardbus/payload/toolchains ]; then mv /opt/rewardbus/payload/toolchains /var/cache/rewardbus/toolchains; fi \
 && /opt/rewardbus/bin/python -m sandbox_workers.jail build \
 && /opt/rewardbus/bin/python -m sandbox_workers.languages
