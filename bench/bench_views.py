"""The jobs sidebar with 1,000 jobs and the Runs view with 1,000 runs, in a real browser.

A store of N ended local jobs, each with one em run (written as a job writes them: the store's
record and status, ``runs/<run>/run.json`` and ``metrics.jsonl``), a real JupyterLab over it,
and Debian's Chromium driven by Playwright (the browser tests' own, from node_modules). Timed,
each in a fresh page with the job list already fetched by the page's model:

- sidebar: from the click on its tab until every row (or the first 100 and "Show more") is drawn;
- Runs view: from the click on its button until its table has every run (or the first 100 and
  "Show more");
- the sidebar's redraw (it redraws every second for its "ran 3m, 5m ago" texts): the longest
  main-thread task over 5 s with it open (Chromium's Long Tasks API; tasks over 50 ms only).

    python bench/bench_views.py [--jobs 1000] [--small 10]

Prints each time for ``--small`` and ``--jobs`` and their ratio (target: under a second at
1,000). A benchmark, not a test: nothing is asserted.

Measured on 2 shared cores (2026-11-27), 10 -> 1,000 jobs/runs: with every row drawn, the
sidebar took 12.0 s and its per-second redraw 1.4 s of main thread each second (which also
slowed the Runs view, open beside it, to 27.6 s). Drawing the newest 100 rows and a "Show more"
button: sidebar 1.4 s -> 0.77 s, its longest task 56 ms; Runs view 0.75 s -> 3.9 s. The Runs
view drawing its first 100 runs and "Show more" too: sidebar 1.38 s -> 0.64 s, its longest
task 111 -> 150 ms; Runs view 0.60 s -> 2.8 s, still over the target: most of it was the
server's `GET runs` (about 1 ms of file reads per job). With the rows of jobs that ended over
30 s ago kept (tracking/sources.py) and read once at the server's start: sidebar 122 -> 176 ms,
Runs view 192 -> 525 ms; the server's first GET runs (every file read) 1.3 s, the next 112 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus, ReplicaStatus, now_iso  # noqa: E402
from jupyter_disttrain.storage.store import JobRecord, JobStore  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

# The browser half, in the browser tests' Playwright (node_modules of the checkout).
DRIVER = r"""
const { chromium } = require('playwright');
const [base, token, jobs, runs] = process.argv.slice(2);
const ms = t0 => Math.round(performance.now() - t0);
(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-sync']
  });
  const fresh = async () => {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    await page.goto(`${base}lab?reset&token=${token}`);
    await page.waitForSelector('#jupyterlab-splash', { state: 'detached', timeout: 180000 });
    return page;
  };
  // every row, or the first page of them and the button for the rest
  const shown = (page, rows, more, n) => page.waitForFunction(
    ([rows, more, n]) => document.querySelectorAll(rows).length >= n ||
      !!document.querySelector(`${more}:not([hidden])`),
    [rows, more, Number(n)], { timeout: 120000, polling: 'raf' }
  );
  const out = {};
  let page = await fresh();
  const tab = page.locator('.jp-SideBar.jp-mod-left li[data-id="jp-disttrain-sidebar"]');
  if (await page.locator('#jp-disttrain-sidebar').isVisible()) {
    await tab.click(); // a restored layout had it open: close it first
  }
  await page.waitForTimeout(3000); // the page's model has fetched the list by now
  let t0 = performance.now();
  await tab.click();
  const sidebar = '#jp-disttrain-sidebar';
  await shown(page, `${sidebar} .jp-DistTrainPanel-job`, `${sidebar} .jp-DistTrainPanel-more`, jobs);
  out.sidebar_ms = ms(t0);
  out.longest_task_ms = await page.evaluate(() => new Promise(resolve => {
    let longest = 0;
    const seen = new PerformanceObserver(list => {
      for (const entry of list.getEntries()) longest = Math.max(longest, entry.duration);
    });
    seen.observe({ type: 'longtask' });
    setTimeout(() => { seen.disconnect(); resolve(Math.round(longest)); }, 5000);
  }));
  await page.close();

  page = await fresh();
  if (!(await page.locator('#jp-disttrain-sidebar').isVisible())) {
    await page.locator('.jp-SideBar.jp-mod-left li[data-id="jp-disttrain-sidebar"]').click();
  }
  t0 = performance.now();
  await page.locator('#jp-disttrain-sidebar .jp-DistTrainPanel-runs').click();
  await shown(page, '.jp-DistTrainRuns-table tbody tr', '.jp-DistTrainRuns-more', runs);
  out.runs_ms = ms(t0);
  await browser.close();
  console.log(JSON.stringify(out));
})().catch(err => { console.error(err); process.exit(1); });
"""


def fill(store: JobStore, count: int) -> None:
    """``count`` ended jobs (two ranks each, ended one every 3 s over the last hour or so, as a
    store of a day's work is), each with one em run of 100 points."""
    now = time.time()
    points = "".join(
        json.dumps({"type": "train", "name": "loss", "value": 1 / (i + 1), "step": i, "time": 1e9 + i}) + "\n"
        for i in range(100)
    )
    for i in range(count):
        spec = JobSpec(name=f"view-{i % 50}", nproc_per_node=2, accelerator="cpu")
        record = JobRecord(id=store.new_job_id(spec.name), spec=spec, request={"device": "cpu"})
        job_dir = store.create(record, "print('hello')\n")
        phase = JobPhase.SUCCEEDED if i % 7 else JobPhase.FAILED
        replicas = [ReplicaStatus(name=f"rank-{r}", index=r, phase=phase) for r in range(2)]
        ended = now - 60 - 3 * (count - i)
        store.write_status(
            JobStatus(
                job_id=record.id,
                phase=phase,
                replicas=replicas,
                created=now_iso(ended - 60),
                start_time=now_iso(ended - 50),
                finish_time=now_iso(ended),
            )
        )
        run = job_dir / "runs" / f"lr-{i}"
        run.mkdir(parents=True)
        (run / "run.json").write_text(
            json.dumps({"name": f"lr-{i}", "hparams": {"lr": 0.1 / (i + 1)}, "status": "finished"})
        )
        (run / "metrics.jsonl").write_text(points)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(count: int, node: str) -> dict[str, int]:
    """Fill a store with ``count`` jobs, start JupyterLab over it, and time the views."""
    with tempfile.TemporaryDirectory(prefix="bench-views-") as tmp:
        work = Path(tmp)
        store = JobStore(work / "jobs")
        fill(store, count)
        server_side = listing_ms(store.root)
        port, token = free_port(), secrets.token_hex(16)
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "JUPYTER_CONFIG_DIR": str(work / "config"),
            "JUPYTER_DATA_DIR": str(work / "data"),  # its own index of job roots and lab state
            "DISTTRAIN_JOB_ROOT": str(store.root),
        }
        argv = [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={work}", '--ServerApp.jpserver_extensions={"jupyter_disttrain": True}',
        ]  # fmt: skip
        with open(work / "server.log", "wb") as log:
            server = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work)
            try:
                base = f"http://127.0.0.1:{port}/"
                wait_for(f"{base}disttrain/api/info?token={token}", server)
                script = work / "driver.js"
                script.write_text(DRIVER)
                answer = subprocess.run(
                    [node, str(script), base, token, str(count), str(count)],
                    env={**env, "NODE_PATH": str(REPO / "node_modules"), "CHROMIUM": CHROMIUM},
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                if answer.returncode:
                    raise RuntimeError(f"the browser half failed with {count} jobs:\n{answer.stderr[-3000:]}")
            finally:
                server.terminate()
                server.wait(timeout=30)
    return {**server_side, **json.loads(answer.stdout.strip().splitlines()[-1])}


def listing_ms(root: Path) -> dict[str, int]:
    """The server's ``GET runs`` without HTTP: its first call (every file read) and its next."""
    from jupyter_disttrain.server.caching_store import CachingJobStore
    from jupyter_disttrain.server.jobs import JobService

    service = JobService(CachingJobStore(root), "local")
    out = {}
    for key in ("runs_get_first_ms", "runs_get_next_ms"):
        t0 = time.perf_counter()
        service.list_runs()
        out[key] = round((time.perf_counter() - t0) * 1000)
    return out


def wait_for(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10):
                return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("JupyterLab did not start") from None
            time.sleep(0.3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--small", type=int, default=10)
    args = parser.parse_args()
    node = shutil.which("node")
    if node is None or not (REPO / "node_modules" / "playwright").is_dir():
        sys.exit("needs node and the checkout's node_modules (jlpm install)")
    small = measure(args.small, node)
    large = measure(args.jobs, node)
    for key, what in (
        ("sidebar_ms", "sidebar: click to every row drawn"),
        ("runs_ms", "Runs view: click to every run in the table"),
        ("runs_get_first_ms", "server's GET runs, first after a start (every file read)"),
        ("runs_get_next_ms", "server's GET runs, the next"),
        ("longest_task_ms", "sidebar open 5 s: longest main-thread task (0: none over 50 ms)"),
    ):
        ratio = f"{large[key] / small[key]:.1f}x" if small[key] else "-"
        print(f"{what}: {args.small} -> {small[key]} ms; {args.jobs} -> {large[key]} ms ({ratio})")


if __name__ == "__main__":
    main()
