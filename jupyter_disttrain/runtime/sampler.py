"""Resource samples of a job's ranks: CPU, memory, threads, I/O and GPU of each rank's process tree.

The local launcher runs a ``Monitor`` in a thread beside its supervision loop; each tick samples
every running rank (the rank and its descendants, e.g. DataLoader workers) and appends one JSON
line to ``metrics/rank-N.jsonl``. psutil and NVML (``nvidia-ml-py``) are imported on first use;
without NVML, or where it fails, one line says so and samples carry no GPU fields at all.

Each series file stays small for any job length (``SeriesFile``): once it passes ``MAX_BYTES``
it is rewritten, in one rename, keeping a sample only when it is at least ``age / DETAIL`` seconds
from the next newer one kept. Recent samples keep their full resolution and old ones thin out
with their age, so a week of 2-second samples keeps a few thousand lines (well under 1 MB) and
still covers the whole week.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

MAX_BYTES = 512 * 1024  # a series file is compacted when it grows past this
# The process table is read whole (for new descendants, e.g. DataLoader workers) every this many
# ticks; in between each rank's known tree is sampled, so a tick reads only the ranks' own files.
RESCAN_TICKS = 5
DEFAULT_INTERVAL = 2.0  # seconds between samples (the local backend's --monitor-interval)
DETAIL = 200  # after compaction, samples of age A are at least A / DETAIL seconds apart


# -- GPU: NVML's documented structures to our sample fields (pure, tested on their own) ---------
def gpu_entry(index: int, utilization: Any, memory: Any, name: str | bytes | None = None) -> dict[str, Any]:
    """One GPU's fields from ``nvmlDeviceGetUtilizationRates`` (``.gpu``: percent of the last
    sample period a kernel ran), ``nvmlDeviceGetMemoryInfo`` (``.used``/``.total``: bytes) and
    ``nvmlDeviceGetName`` (``str``; ``bytes`` from older nvidia-ml-py), left out when None."""
    entry: dict[str, Any] = {
        "index": int(index),
        "util_percent": float(utilization.gpu),
        "mem_used_bytes": int(memory.used),
        "mem_total_bytes": int(memory.total),
    }
    if name is not None:
        entry["name"] = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    return entry


def tree_gpu_memory(processes: Iterable[Any], pids: set[int]) -> int:
    """GPU memory held by ``pids`` from ``nvmlDeviceGetComputeRunningProcesses`` entries
    (``.pid``, ``.usedGpuMemory``: bytes, None where the driver cannot tell, e.g. under MIG)."""
    return sum(int(p.usedGpuMemory or 0) for p in processes if p.pid in pids)


def rank_devices(env: dict[str, str]) -> list[str]:
    """The GPU a rank was given (torchrun's convention: the LOCAL_RANK-th visible device), as an
    NVML index or UUID; [] when it was given none."""
    local_rank = int(env.get("LOCAL_RANK", "0") or 0)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(local_rank)]
    ids = [v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    return [ids[local_rank]] if local_rank < len(ids) else []


class Gpus:
    """NVML, initialised on first use; ``sample`` returns (None, None) when it is not there."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._nvml: Any = None
        self._failed = False
        self._names: dict[str, str | bytes | None] = {}

    def _load(self) -> Any:
        if self._nvml is None and not self._failed:
            try:
                import pynvml

                pynvml.nvmlInit()
                self._nvml = pynvml
            except Exception as exc:  # not installed, no driver, no GPU: all the same here
                self._failed = True
                self._say(f"no GPU measures: NVML is not available ({type(exc).__name__}: {exc})")
        return self._nvml

    def _name(self, nvml: Any, device: str, handle: Any) -> str | bytes | None:
        """The device's name, asked once per device (it does not change); None where NVML cannot say."""
        if device not in self._names:
            try:
                self._names[device] = nvml.nvmlDeviceGetName(handle)
            except Exception:  # an old driver or a device that cannot say: the other fields stay
                self._names[device] = None
        return self._names[device]

    def sample(self, devices: list[str], pids: set[int]) -> tuple[list[dict[str, Any]] | None, int | None]:
        """The rank's devices' utilisation and memory, and the GPU memory of ``pids``."""
        nvml = self._load() if devices else None
        if nvml is None:
            return None, None
        try:
            gpus, mem = [], 0
            for device in devices:
                if device.isdigit():
                    index, handle = int(device), nvml.nvmlDeviceGetHandleByIndex(int(device))
                else:
                    handle = nvml.nvmlDeviceGetHandleByUUID(device)
                    index = int(nvml.nvmlDeviceGetIndex(handle))
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                gpus.append(gpu_entry(index, util, memory, self._name(nvml, device, handle)))
                mem += tree_gpu_memory(nvml.nvmlDeviceGetComputeRunningProcesses(handle), pids)
            return gpus, mem
        except Exception as exc:  # a device that vanished, a driver error: GPU fields go, once said
            self._failed, self._nvml = True, None
            self._say(f"no GPU measures from now on: NVML failed ({type(exc).__name__}: {exc})")
            return None, None


# -- CPU, memory, threads, I/O of a process tree ----------------------------------------------
class TreeSampler:
    """Samples one rank's process tree. The psutil objects are kept between samples, so CPU
    percentages are over the last interval; a process that vanished is simply left out."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self._known: dict[int, Any] = {pid: self.root}
        self.env: dict[str, str] = {}
        with contextlib.suppress(psutil.Error):
            self.env = self.root.environ()

    def sample(self, children: dict[int, list[int]] | None) -> dict[str, Any] | None:
        """The tree's sums, or None once the rank itself has gone (its series ends). ``children``
        is a fresh read of the process table; without one, the tree is the one known already."""
        import psutil

        if not self.root.is_running():
            return None
        pids = list(self._known) if children is None else _descendants(self.root.pid, children)
        procs = []
        for pid in pids:
            proc = self._known.get(pid)
            if proc is None:
                with contextlib.suppress(psutil.Error):
                    proc = self._known[pid] = psutil.Process(pid)
            if proc is not None:
                procs.append(proc)
        totals = {
            "cpu_percent": 0.0,
            "rss_bytes": 0,
            "threads": 0,
            "read_bytes": 0,
            "write_bytes": 0,
            "cpu_s": 0.0,
        }
        alive: set[int] = set()
        for proc in procs:
            with contextlib.suppress(psutil.Error), proc.oneshot():
                cpu, rss, threads = proc.cpu_percent(None), proc.memory_info().rss, proc.num_threads()
                totals["cpu_percent"] += cpu
                totals["rss_bytes"] += rss
                totals["threads"] += threads
                totals["cpu_s"] += _cpu_seconds(proc.cpu_times())
                alive.add(proc.pid)
                with contextlib.suppress(psutil.Error, AttributeError):  # not permitted, not supported
                    io = proc.io_counters()
                    totals["read_bytes"] += io.read_bytes
                    totals["write_bytes"] += io.write_bytes
        if self.root.pid not in alive:
            return None
        self._known = {pid: p for pid, p in self._known.items() if pid in alive}
        totals["cpu_percent"] = round(totals["cpu_percent"], 1)
        totals["cpu_s"] = round(totals["cpu_s"], 3)
        return totals

    @property
    def pids(self) -> set[int]:
        return set(self._known)


def _cpu_seconds(times: Any) -> float:
    """A process's CPU time so far, with that of its children it reaped (a DataLoader worker
    that ended): what the resource-hours count (``cpu_s``, cumulative per start of the rank)."""
    return float(
        times.user + times.system + getattr(times, "children_user", 0) + getattr(times, "children_system", 0)
    )


def children_map() -> dict[int, list[int]]:
    """Every process's children, from one pass over the process table (one per tick, not per rank)."""
    import psutil

    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info.get("ppid")
        if ppid:
            children.setdefault(ppid, []).append(proc.pid)
    return children


def _descendants(pid: int, children: dict[int, list[int]]) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


# -- the series files -------------------------------------------------------------------------
def compacted(samples: list[dict[str, Any]], now: float, detail: int = DETAIL) -> list[dict[str, Any]]:
    """The samples to keep (oldest first): walking from the newest, a sample is kept when it is
    at least ``age / detail`` seconds older than the last one kept. The newest is always kept."""
    kept: list[dict[str, Any]] = []
    for sample in reversed(samples):
        t = float(sample["t"])
        if not kept or float(kept[-1]["t"]) - t >= (now - t) / detail:
            kept.append(sample)
    kept.reverse()
    return kept


class SeriesFile:
    """One replica's append-only JSON-lines series, compacted in place past ``max_bytes``."""

    def __init__(self, path: str, max_bytes: int = MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        try:
            self.size = os.stat(path).st_size
        except OSError:
            self.size = 0

    def append(self, sample: dict[str, Any]) -> None:
        data = (json.dumps(sample, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self.size += len(data)
        if self.size > self.max_bytes:
            self.compact(float(sample["t"]))

    def compact(self, now: float) -> None:
        """Rewrite the file thinned (``compacted``), halving the detail until it is under half
        the limit; readers see the old file or the new one, never a mix."""
        samples = read_series(self.path)
        detail = DETAIL
        while True:
            kept = compacted(samples, now, detail)
            text = "".join(json.dumps(s, separators=(",", ":")) + "\n" for s in kept).encode()
            if len(text) <= self.max_bytes // 2 or detail <= 1:
                break
            detail //= 2
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(text)
        os.replace(tmp, self.path)
        self.size = len(text)


def read_series(path: str, max_bytes: int = 4 * MAX_BYTES) -> list[dict[str, Any]]:
    """A series file's samples (its last ``max_bytes`` at most); a line being written is skipped."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError:
        return []
    if size > max_bytes:  # started mid-line
        data = data.partition(b"\n")[2]
    return parse_samples(data)


def parse_samples(data: bytes) -> list[dict[str, Any]]:
    """The samples of whole lines of a series file; a line that is not one is skipped."""
    out = []
    for line in data.splitlines():
        with contextlib.suppress(ValueError):
            sample = json.loads(line)
            if isinstance(sample, dict) and isinstance(sample.get("t"), (int, float)):
                out.append(sample)
    return out


# -- the loop -----------------------------------------------------------------------------------
class Monitor:
    """Samples the running ranks every ``interval`` seconds into ``metrics_dir``.

    ``ranks()`` names the ranks running now (replica -> pid); ``log_of(replica)`` is the rank's
    log file, whose modification time each sample notes as ``out`` (the liveness history).
    """

    def __init__(
        self,
        metrics_dir: str,
        interval: float,
        ranks: Callable[[], dict[str, int]],
        log_of: Callable[[str], str | None],
        say: Callable[[str], None],
        gpus: bool = True,
    ) -> None:
        self.metrics_dir = metrics_dir
        self.interval = interval
        self.ranks = ranks
        self.log_of = log_of
        self.say = say
        self.gpus = Gpus(say) if gpus else None  # a CPU job: NVML is not even loaded
        self._samplers: dict[str, TreeSampler] = {}
        self._files: dict[str, SeriesFile] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticks = 0

    def start(self) -> None:
        os.makedirs(self.metrics_dir, exist_ok=True)
        info = {"interval": self.interval, "source": "sampler", "started": time.time()}
        tmp = os.path.join(self.metrics_dir, f".monitor.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(info, f)
        os.replace(tmp, os.path.join(self.metrics_dir, "monitor.json"))
        self._thread = threading.Thread(target=self._loop, name="disttrain-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        # Below the training processes' priority: on a busy machine the samples wait, not the ranks.
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except OSError as exc:  # a full disk: monitoring stops, the job goes on
                self.say(f"resource monitoring stopped: {exc}")
                return

    def tick(self) -> None:
        running = self.ranks()
        for gone in set(self._samplers) - set(running):
            del self._samplers[gone]
        if not running:
            return
        fresh = self._ticks % RESCAN_TICKS == 0 or bool(set(running) - set(self._samplers))
        children = children_map() if fresh else None
        self._ticks += 1
        for replica, pid in running.items():
            sample = self._sample(replica, pid, children)
            if sample is None:
                continue
            # Stamped just before it is written: a reader that took its ``now`` earlier and read
            # the file before this write gets it on its next ``since=now`` read (t > its now).
            sample = {"t": round(time.time(), 3), **sample, "pid": pid}
            log = self.log_of(replica)
            if log:
                with contextlib.suppress(OSError):
                    sample["out"] = round(os.stat(log).st_mtime, 3)
            series = self._files.get(replica)
            if series is None:
                path = os.path.join(self.metrics_dir, f"{replica}.jsonl")
                series = self._files[replica] = SeriesFile(path)
            series.append(sample)

    def _sample(self, replica: str, pid: int, children: dict[int, list[int]] | None) -> dict[str, Any] | None:
        import psutil

        sampler = self._samplers.get(replica)
        if sampler is None or sampler.root.pid != pid:  # new, or restarted under a new pid
            try:
                sampler = self._samplers[replica] = TreeSampler(pid)
            except psutil.Error:
                return None
            # A new rank comes with a fresh process table: this learns its tree and starts the
            # CPU clocks (percentages need two readings), so the first sample comes next tick.
            sampler.sample(children)
            return None
        sample = sampler.sample(children)
        if sample is None:
            del self._samplers[replica]
            return None
        if self.gpus is None:
            return sample
        gpus, gpu_mem = self.gpus.sample(rank_devices(sampler.env), sampler.pids)
        if gpus is not None:
            sample["gpus"] = gpus
            sample["gpu_mem_bytes"] = gpu_mem
        return sample
