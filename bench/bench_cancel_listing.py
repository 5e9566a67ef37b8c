"""Listing jobs while 8 jobs are being cancelled, against listing while idle.

A real Jupyter server (a subprocess with the extension on) and 8 real local jobs whose rank
ignores SIGTERM, submitted with ``grace_period`` G: each cancel waits G seconds before
SIGKILL. The 8 cancels are posted at once; while they wait, ``GET disttrain/api/jobs`` is
timed end to end. Cancels run in threads of their own, so the listing (in the server's
shared pool of ``worker_threads``, 8 by default) does not queue behind them.

    python bench/bench_cancel_listing.py [--jobs 8] [--grace 15]

Prints the idle and during-cancel median/p95 listing latency and their ratio, and how long
the cancels took (each at least G: they did wait their grace period).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_list_jobs import ServerProcess

STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL stops it
print("ready", flush=True)
time.sleep(600)
"""


def post(server: ServerProcess, path: str, body: Any) -> Any:
    data = json.dumps(body).encode()
    request = urllib.request.Request(server.base + path, data=data, headers=server.auth, method="POST")
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def timed_listings(server: ServerProcess, seconds: float) -> list[float]:
    times = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        server.get("disttrain/api/jobs")
        times.append((time.perf_counter() - t) * 1000)
        time.sleep(0.05)
    return times


def stats(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--grace", type=float, default=15.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cancel-") as tmp:
        work = Path(tmp)
        server = ServerProcess(work, work / "jobs")
        try:
            spec = {"name": "stubborn", "accelerator": "cpu", "options": {"grace_period": args.grace}}
            ids = [
                post(server, "disttrain/api/jobs", {"script": STUBBORN, "spec": spec})["id"]
                for _ in range(args.jobs)
            ]
            deadline = time.monotonic() + 180
            while True:  # every rank has started (and ignores SIGTERM from now on)
                jobs = server.get("disttrain/api/jobs")["jobs"]
                if sum(j["phase"] == "Running" and j["replicas_ready"] >= 1 for j in jobs) == args.jobs:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"jobs did not all start: {[j['phase'] for j in jobs]}")
                time.sleep(0.5)
            time.sleep(2)
            idle = timed_listings(server, 5)
            took: dict[str, float] = {}

            def cancel(job_id: str) -> None:
                t = time.monotonic()
                post(server, f"disttrain/api/jobs/{job_id}/cancel", {})
                took[job_id] = time.monotonic() - t

            threads = [threading.Thread(target=cancel, args=(job_id,)) for job_id in ids]
            for thread in threads:
                thread.start()
            time.sleep(0.5)  # the cancels are in the server and waiting
            during = timed_listings(server, max(1.0, args.grace - 3))
            for thread in threads:
                thread.join()
        finally:
            server.stop()
    idle_med, idle_p95 = stats(idle)
    busy_med, busy_p95 = stats(during)
    print(
        f"{args.jobs} cancels with grace_period {args.grace:.0f} s took "
        f"{min(took.values()):.1f}-{max(took.values()):.1f} s"
    )
    print(f"GET jobs idle:           median {idle_med:.1f} ms, p95 {idle_p95:.1f} ms ({len(idle)} requests)")
    print(
        f"GET jobs during cancels: median {busy_med:.1f} ms, p95 {busy_p95:.1f} ms ({len(during)} requests)"
    )
    print(f"ratio during/idle: median {busy_med / idle_med:.2f}, p95 {busy_p95 / idle_p95:.2f}")


if __name__ == "__main__":
    main()
