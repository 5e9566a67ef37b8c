"""Reading hostile logs through the server: answer sizes and the server's memory.

Three finished jobs whose rank log is (a) invalid UTF-8 with no newline, (b) tqdm-style ``\\r``
updates with no newline, (c) 1,000,000 normal lines. For each, 4 concurrent readers hit a real
Jupyter server (a subprocess) with the chunk API (``limit=10000`` from the start, resumed by
offset for ``--answers`` answers; ``tail=1``; ``tail=10000``) and the event stream (first
``--answers`` events). Measured: the largest answer (targets: < 8 MB) and the server's peak
RSS over its idle baseline (target: < 100 MB).

    python bench/bench_log_limits.py [--garbage-mb 120] [--bar-mb 200] [--lines 1000000] [--answers 12]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
from bench_list_jobs import ServerProcess

from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus
from jupyter_disttrain.storage.store import JobRecord, JobStore

READERS = 4
_MB = 1_000_000


def write_job(store: JobStore, name: str, fill: Callable[[Path], None]) -> str:
    job_id = store.new_job_id(name)
    store.create(JobRecord(id=job_id, spec=JobSpec(name=name)), "print('hi')\n")
    store.write_status(JobStatus(job_id=job_id, phase=JobPhase.SUCCEEDED))
    fill(store.logs_dir(job_id) / "rank-0.log")
    return job_id


def garbage(mb: int) -> Callable[[Path], None]:
    def fill(path: Path) -> None:
        block = bytes(range(128, 256)) * 8192  # 1 MiB of bytes that are never valid UTF-8
        with open(path, "wb") as f:
            for _ in range(mb * _MB // len(block)):
                f.write(block)

    return fill


def progress_bar(mb: int) -> Callable[[Path], None]:
    def fill(path: Path) -> None:
        with open(path, "wb") as f:
            i = 0
            while f.tell() < mb * _MB:
                f.write(
                    b"".join(
                        f"\r{n:>9} it |{'#' * (n % 50):<50}| {n % 100}%".encode()
                        for n in range(i, i + 10_000)
                    )
                )
                i += 10_000

    return fill


def normal_lines(count: int) -> Callable[[Path], None]:
    def fill(path: Path) -> None:
        with open(path, "wb") as f:
            for start in range(0, count, 10_000):
                f.write(
                    b"".join(
                        f"step {n} loss {1 / (n + 1):.6f} lr 0.001\n".encode()
                        for n in range(start, start + 10_000)
                    )
                )

    return fill


class Reader:
    def __init__(self, server: ServerProcess, job_id: str, answers: int) -> None:
        self.server, self.job_id, self.answers = server, job_id, answers
        self.sizes: list[int] = []

    def get(self, query: str) -> bytes:
        url = f"{self.server.base}disttrain/api/jobs/{self.job_id}/logs?{query}"
        request = urllib.request.Request(url, headers=self.server.auth)
        with urllib.request.urlopen(request, timeout=600) as response:
            body: bytes = response.read()
        self.sizes.append(len(body))
        return body

    def run(self) -> None:
        import json

        offset = ""
        for _ in range(self.answers):
            chunk = json.loads(self.get("limit=10000" + (f"&offset={offset}" if offset else "")))
            if chunk["done"] or not chunk["lines"]:
                break
            offset = urllib.parse.quote(chunk["offset"])
        self.get("tail=1")
        self.get("tail=10000&limit=10000")
        self.stream()

    def stream(self) -> None:
        url = f"{self.server.base}disttrain/api/jobs/{self.job_id}/logs/stream"
        request = urllib.request.Request(url, headers=self.server.auth)
        events, pending = 0, b""
        with urllib.request.urlopen(request, timeout=600) as response:
            while events < self.answers:
                data = response.read1(1 << 20)
                if not data:
                    break
                pending += data
                *blocks, pending = pending.split(b"\n\n")
                for block in blocks:
                    self.sizes.append(len(block))
                    events += block.startswith(b"id:") or b"event: lines" in block


def measure(server: ServerProcess, job_id: str, answers: int) -> tuple[int, int, int]:
    """(largest answer, answers, peak RSS growth) while READERS read ``job_id`` at once."""
    proc = psutil.Process(server.proc.pid)
    baseline = proc.memory_info().rss
    peak = baseline
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, proc.memory_info().rss)
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    readers = [Reader(server, job_id, answers) for _ in range(READERS)]
    with ThreadPoolExecutor(READERS) as pool:
        for future in [pool.submit(r.run) for r in readers]:
            future.result()
    stop.set()
    sampler.join()
    sizes = [s for r in readers for s in r.sizes]
    return max(sizes), len(sizes), peak - baseline


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--garbage-mb", type=int, default=120)
    parser.add_argument("--bar-mb", type=int, default=200)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--answers", type=int, default=12, help="chunk answers and stream events per reader")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-log-limits-") as tmp:
        work = Path(tmp)
        store = JobStore(work / "jobs")
        logs = {
            f"invalid UTF-8, no newline ({args.garbage_mb} MB)": write_job(
                store, "garbage", garbage(args.garbage_mb)
            ),
            f"\\r progress updates ({args.bar_mb} MB)": write_job(store, "bar", progress_bar(args.bar_mb)),
            f"{args.lines:,} normal lines": write_job(store, "lines", normal_lines(args.lines)),
        }
        server = ServerProcess(work, store.root)
        try:
            time.sleep(1.0)  # let the server settle before its baseline is taken
            print(f"{READERS} concurrent readers per log; targets: every answer < 8 MB, RSS growth < 100 MB")
            for what, job_id in logs.items():
                size = os.path.getsize(store.logs_dir(job_id) / "rank-0.log")
                largest, count, growth = measure(server, job_id, args.answers)
                print(
                    f"{what}: file {size / _MB:.0f} MB, {count} answers, largest {largest / _MB:.2f} MB, "
                    f"server RSS growth {growth / _MB:.1f} MB"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
