"""Write the worker container's seccomp profile: the engine's default, narrowed and widened.

Docker's default profile lets a CAP_SYS_ADMIN container call unshare, mount,
setns, sethostname and clone with namespace flags, but never pivot_root, which
the jail's mount layer needs (`rbjail --probe`: "mounts missing pivot_root").
This script takes the default profile of the installed engine's own version
(Debian ships it in ``golang-github-docker-docker-dev``; images.sh extracts it
with ``apt-get download``, so no third-party file lives in this repository),
and rewrites the group gated on CAP_SYS_ADMIN to exactly what the jail calls::

    python3 infra/docker/seccomp.py DEFAULT_JSON OUT_JSON

Everything else stays as Docker has it; the SYS_ADMIN-gated calls the jail does
not make (bpf, perf_event_open, fanotify_init, quotactl, syslog, the new mount
API, name_to_handle_at, ...) are no longer allowed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# What sandbox_workers/native/ calls with CAP_SYS_ADMIN, and nothing else.
JAIL_SYS_ADMIN_CALLS = (
    "clone",
    "clone3",
    "mount",
    "umount",
    "umount2",
    "unshare",
    "setns",
    "sethostname",
    "pivot_root",
)


def derive(default: dict[str, object]) -> dict[str, object]:
    """The default profile with its CAP_SYS_ADMIN group replaced by the jail's calls."""
    rules = default["syscalls"]
    assert isinstance(rules, list)
    gated = [
        rule
        for rule in rules
        if rule.get("includes", {}).get("caps") == ["CAP_SYS_ADMIN"]
        and rule.get("action") == "SCMP_ACT_ALLOW"
        and not rule.get("args")
    ]
    if len(gated) != 1:
        found = len(gated)
        raise SystemExit(f"expected one CAP_SYS_ADMIN allow rule in the default, found {found}")
    gated[0]["names"] = list(JAIL_SYS_ADMIN_CALLS)
    gated[0]["comment"] = "rewardbus-worker: only what the jail calls (infra/docker/seccomp.py)"
    return default


def main(argv: list[str]) -> int:
    """Read the default profile, write the derived one."""
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    source, target = (Path(a) for a in argv)
    profile = derive(json.loads(source.read_text()))
    target.write_text(json.dumps(profile, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
