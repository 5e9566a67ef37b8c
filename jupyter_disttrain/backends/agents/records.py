"""What each replica of a local job says of itself: its record in ``ranks/``.

The rank wrapper (``runtime/worker.py``) writes one record per replica (pid, node, restarts,
start and finish time, exit code) and replaces it as the replica goes; the supervisor reads the
records that changed since its last look and turns each into the replica's status.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...model.specs import JobPhase, ReplicaStatus
from ...runtime import contract
from ...storage.logfiles import last_line
from ...storage.store import read_json


class ReplicaRecords:
    """The replicas' records, read again only when a file changed."""

    def __init__(self, job_dir: Path) -> None:
        self.ranks_dir = job_dir / contract.RANKS_DIR
        self.by_name: dict[str, dict[str, Any]] = {}  # every replica's record
        self.by_rank: dict[int, dict[str, Any]] = {}  # torch ranks' records
        self._mtimes: dict[str, float] = {}

    def read(self) -> bool:
        """Read the records written since the last call; True when one changed."""
        changed = False
        try:
            entries = list(os.scandir(self.ranks_dir))
        except FileNotFoundError:
            return False
        for e in entries:
            if not e.name.endswith(".json"):
                continue
            mtime = e.stat().st_mtime
            if self._mtimes.get(e.name) == mtime:
                continue
            try:
                data = read_json(Path(e.path))
            except (OSError, ValueError):
                continue  # being replaced right now; read it next round
            self._mtimes[e.name] = mtime
            rank = int(data.get("rank", -1))
            name = str(data.get("replica") or contract.rank_name(rank))
            self.by_name[name] = data
            if name == contract.rank_name(rank):
                self.by_rank[rank] = data
            changed = True
        return changed

    def running(self) -> dict[str, int]:
        """The replicas running now (name -> pid: torch's ranks and a parameter-server job's
        processes alike); safe to call from another thread."""
        records = list(self.by_name.items())
        return {
            name: int(rec["pid"]) for name, rec in records if rec.get("exit_code") is None and "pid" in rec
        }


def replica_status(name: str, role: str, index: int, rec: dict[str, Any] | None, log: Path) -> ReplicaStatus:
    """A replica's status as its record tells it (Pending without one); a failed replica's
    message is the last line of its ``log``."""
    rep = ReplicaStatus(name=name, role=role, index=index)
    if rec:
        rep.node = f"node-{rec.get('node', 0)}"
        rep.restarts = int(rec.get("restarts", 0))
        rep.start_time = rec.get("start_time")
        rep.finish_time = rec.get("finish_time")
        code = rec.get("exit_code")
        if code is None:
            rep.phase, rep.ready = JobPhase.RUNNING, True
        elif code == 0:
            rep.phase, rep.exit_code = JobPhase.SUCCEEDED, 0
        else:
            rep.phase, rep.exit_code, rep.reason = JobPhase.FAILED, int(code), "Error"
            rep.message = last_line(log)
    return rep
