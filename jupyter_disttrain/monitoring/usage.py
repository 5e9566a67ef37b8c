"""What a job held and used, in accelerator hours: GPU-hours, or CPU core-hours for a CPU job.

*Allocated*: the devices the job held (one GPU per rank of a GPU job; one core per rank of a CPU
job, the one thread torchrun gives each) times the hours from its start to its end (or now).
*Used*: for a GPU job, each rank's GPU utilisation integrated over its samples; for a CPU job, the
CPU time of each rank's process tree (the samples' cumulative ``cpu_s``, which a restarted rank
starts again from 0: each start is summed; a rank's own count at its exit, in its record, where
that is later than its last sample). A resumed job's run counts the jobs it was resumed from too
(``run_hours``).

Series are read as they grow: ``UsageTails`` keeps each file's sums and reads only what was
appended since (a compacted file, a new inode, is read again whole, bounded).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.specs import JobStatus, iso_seconds, now_iso, request_device
from ..payloads.monitoring import ResourceHours
from ..runtime import contract
from ..runtime.sampler import MAX_BYTES, parse_samples

if TYPE_CHECKING:
    from ..storage.store import JobRecord

PRICES_ENV = "DISTTRAIN_PRICES"  # {"gpu": 2.5, "core": 0.04, "currency": "USD", "backends": {...}}
_READ = 4 * MAX_BYTES  # bytes of a series read at once, at most


@dataclass
class _Sums:
    """One series file's sums so far."""

    inode: int = -1
    offset: int = 0
    gpu_seconds: float = 0.0  # utilisation-weighted GPU seconds
    cpu_done: float = 0.0  # CPU seconds of earlier starts of the rank (other pids)
    cpu_now: float = 0.0  # the current start's cumulative CPU seconds
    pid: int | None = None
    last_t: float | None = None
    gpus: int = 0  # GPUs its samples showed

    def add(self, samples: list[dict[str, Any]]) -> None:
        for s in samples:
            t = float(s["t"])
            cpu = s.get("cpu_s")
            if isinstance(cpu, (int, float)):
                if s.get("pid") != self.pid:  # a new start of the rank: its clock began again
                    self.cpu_done, self.cpu_now, self.pid = self.cpu_done + self.cpu_now, 0.0, s.get("pid")
                # the tree's sum dips while a child that ended is not yet reaped into its parent's
                self.cpu_now = max(self.cpu_now, float(cpu))
            gpus = s.get("gpus")
            if isinstance(gpus, list) and gpus and self.last_t is not None and t > self.last_t:
                busy = sum(float(g.get("util_percent", 0.0)) for g in gpus if isinstance(g, dict))
                self.gpu_seconds += busy / 100 * (t - self.last_t)
                self.gpus = max(self.gpus, len(gpus))
            self.last_t = t

    @property
    def cpu_seconds(self) -> float:
        return self.cpu_done + self.cpu_now


@dataclass
class UsageTails:
    """Every followed series' sums (one per server, kernel or launcher)."""

    files: dict[str, _Sums] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sums(self, path: Path) -> _Sums:
        with self.lock:
            key = str(path)
            sums = self.files.get(key)
            try:
                with open(path, "rb") as f:
                    info = os.fstat(f.fileno())
                    if sums is None or sums.inode != info.st_ino or info.st_size < sums.offset:
                        sums = _Sums(inode=info.st_ino, offset=max(0, info.st_size - _READ))
                    f.seek(sums.offset)
                    data = f.read(_READ)
            except OSError:
                return sums or _Sums()
            first = data.find(b"\n") + 1 if sums.offset and sums.last_t is None else 0
            end = data.rfind(b"\n") + 1
            sums.add(parse_samples(data[first:end]))
            sums.offset += end
            self.files[key] = sums
            return sums


TAILS = UsageTails()


def _exit_cpu(job_dir: Path, replica: str) -> float | None:
    """The CPU seconds a rank's wrapper counted at its exit (its last start's)."""
    from ..storage.store import read_json

    try:
        value = read_json(job_dir / contract.RANKS_DIR / contract.record_file(replica)).get("cpu_seconds")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def job_hours(
    job_dir: Path, record: JobRecord, status: JobStatus, prices: Mapping[str, Any] | None = None
) -> ResourceHours | None:
    """What the job held and used (None before it started)."""
    if not status.start_time:
        return None
    gpu = not (record.spec.accelerator == "cpu" or request_device(record.request) == "cpu")
    held = max(0.0, iso_seconds(status.finish_time or now_iso()) - iso_seconds(status.start_time))
    devices = record.spec.world_size
    used = 0.0
    for replica in [r.name for r in status.replicas]:
        sums = TAILS.sums(job_dir / contract.METRICS_DIR / contract.metrics_file(replica))
        if gpu:
            used += sums.gpu_seconds
        else:
            at_exit = _exit_cpu(job_dir, replica)
            used += sums.cpu_done + max(sums.cpu_now, at_exit or 0.0)
    hours = ResourceHours("gpu" if gpu else "core", round(devices * held / 3600, 6), round(used / 3600, 6))
    return priced(hours, record.spec.backend, prices)


def priced(hours: ResourceHours, backend: str, prices: Mapping[str, Any] | None = None) -> ResourceHours:
    """``hours`` with its cost by the price table (``DISTTRAIN_PRICES``, per hour allocated)."""
    table = read_prices() if prices is None else prices
    rate = {**table, **(table.get("backends") or {}).get(backend, {})}.get(hours.unit)
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        hours.cost = round(hours.allocated * float(rate), 4)
        hours.currency = str(table.get("currency") or "")
    return hours


def read_prices(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The price table: ``DISTTRAIN_PRICES`` as JSON ({} when unset or not a JSON object)."""
    text = (os.environ if env is None else env).get(PRICES_ENV, "")
    try:
        table = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return table if isinstance(table, dict) else {}


def summed(parts: list[ResourceHours]) -> ResourceHours | None:
    """Several jobs' hours as one (a run resumed across jobs); None when there are none."""
    if not parts:
        return None
    total = ResourceHours(parts[0].unit, 0.0, 0.0)
    for part in parts:
        total.allocated += part.allocated
        total.used += part.used
        if part.cost is not None:
            total.cost = (total.cost or 0.0) + part.cost
            total.currency = part.currency
    total.allocated, total.used = round(total.allocated, 6), round(total.used, 6)
    return total
