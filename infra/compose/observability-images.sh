#!/usr/bin/env bash
# Small Jaeger and Prometheus images for the compose file, from the Go binaries that
# `make observability-tools` builds into $REWARDBUS_CACHE/bin (no registry needed).
set -euo pipefail
cache=${REWARDBUS_CACHE:-$HOME/.cache/rewardbus}
base=${BASE_IMAGE:-rewardbus-base:bookworm}
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
build() {
  local name=$1 binary=$2 ctx
  [ -x "$binary" ] || { echo "error: no $name binary ($binary): run make observability-tools" >&2; exit 1; }
  ctx=$(mktemp -d)
  cp "$binary" "$ctx/$name"
  cp "$repo/infra/compose/prometheus.yml" "$repo"/infra/prometheus/*.rules.yml "$ctx/"
  cat >"$ctx/Dockerfile" <<DOCKERFILE
ARG BASE_IMAGE
FROM \${BASE_IMAGE}
COPY $name prometheus.yml *.rules.yml /opt/$name/
USER 65534:65534
ENTRYPOINT ["/opt/$name/$name"]
DOCKERFILE
  docker build -q --build-arg "BASE_IMAGE=$base" -t "rewardbus-$name:latest" "$ctx" >/dev/null
  rm -rf "$ctx"
  echo "built rewardbus-$name:latest"
}
# The binaries' paths (their names carry version and build variant), built if missing.
build jaeger "$("$python" -m rewardbus.observability.gotools jaeger)"
build prometheus "$("$python" -m rewardbus.observability.gotools prometheus)"
