#!/bin/sh
# rewardbus-worker entrypoint: give the jail the container's own cgroup subtree, then
# exec `rewardbus "$@"` as PID 1 (signals reach it; it drains and leaves on SIGTERM).
#
# Docker and Kubernetes mount /sys/fs/cgroup read-only in unprivileged containers. In a
# private cgroup namespace (--cgroupns=private; Kubernetes' default on cgroup v2) the
# mounted tree is the container's own cgroup, already bounded by the limits the
# engine set, so making it writable delegates only that subtree: the jail creates
# per-execution cgroups inside it. With the host's cgroup namespace the tree is the
# host's, and it is left read-only (the worker then reports the cgroup layers missing).
set -eu
own=$(cut -d: -f3 /proc/self/cgroup | sort -u)
if [ "$own" = "/" ] && [ -d /sys/fs/cgroup ]; then
  # Remounting needs CAP_SYS_ADMIN; without it the layers are reported, not faked.
  for m in $(awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/mounts); do
    mount -o remount,bind,rw "$m" 2>/dev/null || mount -o remount,rw "$m" 2>/dev/null || true
  done
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    # cgroup v2 forbids processes in a cgroup that delegates controllers: move this
    # process (the worker, after exec) into a leaf, then enable the controllers below the root.
    mkdir -p /sys/fs/cgroup/worker 2>/dev/null || true
    echo $$ >/sys/fs/cgroup/worker/cgroup.procs 2>/dev/null || true
    for c in memory pids cpu; do
      echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    done
  fi
fi
exec rewardbus "$@"
