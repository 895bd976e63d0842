#!/usr/bin/env bash
# Start a Docker engine for `make images` and the container tests, unless one answers.
# CI machines have no engine running (and no systemd): run dockerd ourselves with
# the vfs storage driver (overlayfs is not available inside this kind of VM), log
# to a file under the cache, and wait for the socket. Needs root to start one.
set -euo pipefail
cache=${REWARDBUS_CACHE:-$HOME/.cache/rewardbus}
log=$cache/dockerd.log
timeout_s=${DOCKERD_TIMEOUT_S:-60}

# `make test` on a fresh machine: the engine and debootstrap (for the base image)
# come from Debian's packages, as .ci/run installs them.
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v docker-compose >/dev/null || missing+=(docker-compose)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing ${missing[*]} from apt" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

if docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
  exit 0
fi
command -v dockerd >/dev/null || {
  echo "error: no Docker engine answers and dockerd is not installed (apt-get install docker.io)" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || { echo "error: no Docker engine answers; starting dockerd needs root" >&2; exit 1; }
mkdir -p "$cache"
# setsid: the engine outlives this script and the make that ran it.
# A private cgroup namespace by default: the worker's jail needs one (docs/containers.md)
# and docker-compose 1.29 cannot request it per service.
setsid dockerd --storage-driver="${DOCKERD_STORAGE_DRIVER:-vfs}" --default-cgroupns-mode=private >>"$log" 2>&1 </dev/null &
echo $! >"$cache/dockerd.pid"
deadline=$(( $(date +%s) + timeout_s ))
until docker version --format '{{.Server.Version}}' >/dev/null 2>&1; do
  if ! kill -0 "$(cat "$cache/dockerd.pid")" 2>/dev/null; then
    echo "error: dockerd exited; last lines of $log:" >&2; tail -20 "$log" >&2; exit 1
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "error: dockerd did not answer within ${timeout_s}s; see $log" >&2; exit 1
  fi
  sleep 0.5
done
echo "dockerd $(docker version --format '{{.Server.Version}}') running (pid $(cat "$cache/dockerd.pid"), log $log)"
