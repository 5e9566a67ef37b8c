"""Following a busy job's logs over the server-sent-event stream.

A real local job with 4 ranks prints 250,000 lines in total, each stamped with the time it
was printed, while a client follows ``GET disttrain/api/jobs/<id>/logs/stream`` on a real
Jupyter server (a subprocess). Checked: every line arrives exactly once and each rank's
lines in order. Measured: print-to-arrival latency, and the server's RSS while it streams.

    python bench/bench_log_stream.py [--lines 250000] [--ranks 4] [--rates 2500,5000,0]

Each rate in ``--rates`` is one run, its ranks paced to that many lines per second (0: as
fast as they can print: a burst that, on 2 cores, competes with the server for CPU).
The last lines are the figures (targets: exactly once, in order, p95 <= 250 ms, RSS flat).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from bench_list_jobs import ServerProcess
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from jupyter_disttrain.api import submit
from jupyter_disttrain.storage.store import JobStore

SCRIPT = """
import os, time
rank, n, rate = int(os.environ["RANK"]), {per_rank}, {rate}
start = time.time()
for i in range(n):
    if rate and i % 100 == 0:
        ahead = start + i / rate - time.time()
        if ahead > 0:
            time.sleep(ahead)
    print(f"L {{rank}} {{i}} {{time.time():.6f}}", flush=True)
"""


class SseFollower:
    """Takes the event stream as it arrives, then checks each line against what was printed.

    While the stream runs it only cuts the bytes into events and stamps each with its arrival
    time; parsing and checking wait until the end, so that the client's own bookkeeping does
    not hold back reading the socket (and so inflate the latency it measures).
    """

    def __init__(self, ranks: int) -> None:
        self.pending = b""
        self.arrived: list[tuple[float, bytes]] = []
        self.next_index = [0] * ranks
        self.latencies: list[float] = []
        self.duplicates = self.out_of_order = self.events = 0
        self.end: dict[str, object] | None = None

    def feed(self, chunk: bytes) -> None:
        now = time.time()
        self.pending += chunk
        if b"\n\n" in self.pending:
            *blocks, self.pending = self.pending.split(b"\n\n")
            self.arrived += [(now, block) for block in blocks]

    def check(self) -> None:
        """Parse the events that arrived and check every line in them."""
        for now, block in self.arrived:
            kind = data = None
            for field in block.decode("utf-8").split("\n"):
                if field.startswith("event: "):
                    kind = field[7:]
                elif field.startswith("data: "):
                    data = json.loads(field[6:])
            if kind == "lines" and data is not None:
                self.events += 1
                for run in data["runs"]:
                    for text in run["lines"]:
                        self._check(text, now)
            elif kind == "end" and data is not None:
                self.end = data

    def _check(self, text: str, now: float) -> None:
        parts = text.split(" ")
        if len(parts) != 4 or parts[0] != "L":
            return  # launcher notes, warnings: not ours to count
        rank, index, printed = int(parts[1]), int(parts[2]), float(parts[3])
        expected = self.next_index[rank]
        if index < expected:
            self.duplicates += 1
        elif index > expected:
            self.out_of_order += 1
        self.next_index[rank] = max(expected, index + 1)
        self.latencies.append(now - printed)


def sample_rss(pid: int, samples: list[int], stop: threading.Event) -> None:
    proc = psutil.Process(pid)
    while not stop.is_set():
        samples.append(proc.memory_info().rss)
        stop.wait(0.2)


async def follow(server: ServerProcess, job_id: str, follower: SseFollower) -> None:
    url = f"{server.base}disttrain/api/jobs/{job_id}/logs/stream"
    request = HTTPRequest(url, headers=server.auth, streaming_callback=follower.feed, request_timeout=3600)
    await AsyncHTTPClient().fetch(request)


def run_once(
    server: ServerProcess, root: Path, lines: int, ranks: int, rate: float
) -> tuple[list[str], bool]:
    """One job followed to its end; returns the figure lines and whether every line came once."""
    per_rank = lines // ranks
    samples: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_rss, args=(server.proc.pid, samples, stop), daemon=True)
    baseline = psutil.Process(server.proc.pid).memory_info().rss
    sampler.start()
    script = SCRIPT.format(per_rank=per_rank, rate=rate)
    # 4 ranks on a 2-core VM: more processes than CPUs, on purpose.
    job = submit(
        script,
        store=JobStore(root),
        name="stream",
        gpus=ranks,
        accelerator="cpu",
        options={"oversubscribe": True},
    )
    follower = SseFollower(ranks)
    asyncio.run(follow(server, job.id, follower))
    follower.check()
    stop.set()
    sampler.join()
    got = len(follower.latencies)
    span = max(1e-9, follower.arrived[-1][0] - follower.arrived[0][0]) if follower.arrived else 1e-9
    missing = sum(per_rank - n for n in follower.next_index)
    lat = sorted(follower.latencies) or [float("nan")]
    p95 = lat[int(0.95 * (len(lat) - 1))]
    mb = 1 << 20
    peak = max(samples, default=baseline)
    pace = f"{rate:,.0f} lines/s per rank" if rate else "unpaced (as fast as the ranks can print)"
    dup, disorder = follower.duplicates, follower.out_of_order
    figures = [
        f"[{pace}] job {job.id} {job.status().phase.value}; {got} lines in {follower.events} events, "
        f"first to last arrival {span:.2f} s ({got / span:,.0f} lines/s)",
        f"[{pace}] exactly once: missing {missing}, duplicates {dup}, out of order {disorder}",
        f"[{pace}] latency print->arrival: median {statistics.median(lat) * 1000:.0f} ms, "
        f"p95 {p95 * 1000:.0f} ms, max {lat[-1] * 1000:.0f} ms (target p95 <= 250 ms)",
        f"[{pace}] server RSS: before {baseline / mb:.0f} MB, peak {peak / mb:.0f} MB, "
        f"growth {(peak - baseline) / mb:+.1f} MB",
    ]
    return figures, missing == 0 and dup == 0 and disorder == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=250_000)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument(
        "--rates",
        default="2500,5000,0",
        help="comma-separated lines per second per rank, one run each (0: unpaced burst)",
    )
    args = parser.parse_args()
    figures: list[str] = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        work = Path(tmp)
        server = ServerProcess(work, work / "jobs")
        try:
            time.sleep(1.0)
            for rate in (float(r) for r in args.rates.split(",")):
                lines, good = run_once(server, work / "jobs", args.lines, args.ranks, rate)
                print("\n".join(lines), flush=True)
                figures += lines
                ok = ok and good
        finally:
            server.stop()
    print("---- figures ----")
    print("\n".join(figures))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
