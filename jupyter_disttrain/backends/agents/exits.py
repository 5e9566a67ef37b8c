"""How each rank of a local job ended when it could not say so itself (killed by a signal).

A rank records its own exit code when its script ends (``runtime/worker.py``); a rank killed by
a signal (the kernel's OOM killer sends SIGKILL) records nothing. Its torchrun agent reaped it
and printed a failure report into ``agent-N.log``: each failed worker's exit code and pid, with
the first failure under "Root Cause". The pid ties an entry to the rank's own record.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from pathlib import Path

REPORT_BYTES = 64 * 1024  # the report closes the agent's log: read its end only
_ENTRY = re.compile(r"exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)")
_ROOT = "Root Cause (first observed failure):"
# Where the kernel counts OOM kills of this cgroup: cgroup v2, then v1 (in a container, the
# memory controller's mount is usually the container's own cgroup).
_OOM_COUNTERS = (("memory.events", "oom_kill "), ("memory.oom_control", "oom_kill "))


@dataclass(frozen=True)
class AgentExit:
    """A worker's end as its agent saw it."""

    pid: int
    code: int
    root_cause: bool

    @property
    def signal_name(self) -> str | None:
        """``SIGKILL`` for an exit by signal 9 (torch reports it as code -9), else None."""
        return signal_name(self.code)


def signal_name(code: int) -> str | None:
    """``SIGKILL`` for a process that returned -9 (Popen's and torch's way to say "signal 9")."""
    if code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def agent_exits(agent_log: Path) -> dict[int, AgentExit]:
    """The failed workers of an agent's last failure report, by pid (empty when there is none)."""
    try:
        with open(agent_log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - REPORT_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return {}
    before, _, root = text.rpartition(_ROOT)
    if not before:
        return {}
    exits = {}
    failures = before[before.rfind("Failures:") :] if "Failures:" in before else ""
    for part, is_root in ((failures, False), (root, True)):
        for code, pid in _ENTRY.findall(part):
            exits[int(pid)] = AgentExit(int(pid), int(code), is_root)
    return exits


def _cgroup_dirs() -> list[Path]:
    """This process's memory cgroup directories, most specific first."""
    dirs = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            dirs.append(Path("/sys/fs/cgroup") / path.lstrip("/"))
        elif "memory" in controllers.split(","):
            dirs += [Path("/sys/fs/cgroup/memory") / path.lstrip("/"), Path("/sys/fs/cgroup/memory")]
    return dirs


def oom_kills() -> int | None:
    """How many processes the OOM killer has killed in this cgroup so far (None: not readable)."""
    for directory in _cgroup_dirs():
        for name, key in _OOM_COUNTERS:
            try:
                for line in (directory / name).read_text().splitlines():
                    if line.startswith(key):
                        return int(line.split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return None
