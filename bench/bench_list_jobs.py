"""Listing jobs through the REST API with 1,000 jobs in the store.

A real Jupyter server (a subprocess with the extension on) over a store filled with 1,000
local-backend jobs: most ended, some "running" under a launcher pid that is alive, so the
backend's reconciliation is exercised too. Each running rank has what its liveness ("quiet") is
read from: a log, a full resource series (as a long job's) and em metrics.
``GET disttrain/api/jobs`` is timed end to end.

    python bench/bench_list_jobs.py [--jobs 1000] [--rounds 40]

The server reads every job once as it starts (in a worker thread) and the first listing
makes every job's summary; later ones redo only the jobs that changed (here the running
ones). The last line is the median and p95 of those (target: 1,000 jobs in <= 200 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus, ReplicaStatus  # noqa: E402
from jupyter_disttrain.runtime.sampler import MAX_BYTES  # noqa: E402
from jupyter_disttrain.storage.store import JobRecord, JobStore, write_record  # noqa: E402


class ServerProcess:
    """``jupyter server`` with the extension, on 127.0.0.1 and a free port, over ``job_root``."""

    def __init__(self, workdir: Path, job_root: Path, extra: list[str] | None = None) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}/"
        config = workdir / "jupyter_server_config.json"
        config.write_text(json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_disttrain": True}}}))
        env = {**os.environ, "PYTHONPATH": str(REPO), "JUPYTER_CONFIG_DIR": str(workdir)}
        env.pop("DISTTRAIN_JOB_ROOT", None)
        self.log = open(workdir / "server.log", "wb")  # noqa: SIM115 -- closed in stop()
        argv = [
            sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={workdir}",
            f"--DistTrainApp.job_root={job_root}", *(extra or []),
        ]  # fmt: skip
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=workdir)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.get("disttrain/api/info")
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start; see {workdir / 'server.log'}") from None
                time.sleep(0.2)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def get(self, path: str) -> Any:
        request = urllib.request.Request(self.base + path, headers=self.auth)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def fill_store(store: JobStore, count: int) -> None:
    """``count`` local jobs: 9 in 10 ended, the rest running under this (live) process's pid."""
    for i in range(count):
        spec = JobSpec(name=f"bench-{i % 50}", nproc_per_node=2, accelerator="cpu")
        record = JobRecord(id=store.new_job_id(spec.name), spec=spec, request={"device": "cpu"})
        store.create(record, "print('hello')\n")
        running = i % 10 == 0
        phase = JobPhase.RUNNING if running else JobPhase.SUCCEEDED
        replicas = [ReplicaStatus(name=f"rank-{r}", index=r, phase=phase) for r in range(2)]
        store.write_status(
            JobStatus(job_id=record.id, phase=phase, replicas=replicas, created=record.created)
        )
        if running:
            launcher = {"pid": os.getpid(), "create_time": _create_time()}
            write_record(store.job_dir(record.id) / "launcher.json", launcher)
            write_liveness_files(store.job_dir(record.id), [r.name for r in replicas])


def write_liveness_files(job_dir: Path, replicas: list[str]) -> None:
    """Each rank's log and series (one sample a second, up to the size the sampler compacts at)
    and rank 0's em metrics, as a job running for hours has them."""
    now = time.time()
    count = MAX_BYTES // 130  # samples of ~130 bytes
    for name in replicas:
        samples = (
            {"t": now - count + i, "cpu_percent": 99.5, "rss_bytes": 1 << 30, "threads": 12,
             "read_bytes": 4096 * i, "write_bytes": 1024 * i, "out": now - count + i}
            for i in range(count)
        )  # fmt: skip
        (job_dir / "metrics").mkdir(exist_ok=True)
        (job_dir / "metrics" / f"{name}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
        (job_dir / "logs").mkdir(exist_ok=True)
        (job_dir / "logs" / f"{name}.log").write_text("step\n" * 1000)
    (job_dir / "runs" / "r1").mkdir(parents=True, exist_ok=True)
    (job_dir / "runs" / "r1" / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n' * 1000)


def _create_time() -> float:
    import psutil

    return float(psutil.Process().create_time())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-list-") as tmp:
        work = Path(tmp)
        store = JobStore(work / "jobs")
        t0 = time.perf_counter()
        fill_store(store, args.jobs)
        print(f"filled the store with {args.jobs} jobs in {time.perf_counter() - t0:.1f} s")
        server = ServerProcess(work, store.root)
        try:
            t = time.perf_counter()
            jobs = server.get("disttrain/api/jobs")["jobs"]
            cold = (time.perf_counter() - t) * 1000  # summaries of every job are made once
            assert len(jobs) == args.jobs, len(jobs)
            times = []
            for _ in range(args.rounds):
                t = time.perf_counter()
                server.get("disttrain/api/jobs")
                times.append((time.perf_counter() - t) * 1000)
        finally:
            server.stop()
    times.sort()
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    print(f"first listing after the server started: {cold:.0f} ms")
    print(f"rounds: {args.rounds}; min {times[0]:.1f} ms")
    median = statistics.median(times)
    print(f"list {args.jobs} jobs: median {median:.1f} ms, p95 {p95:.1f} ms (target <= 200 ms)")


if __name__ == "__main__":
    main()
