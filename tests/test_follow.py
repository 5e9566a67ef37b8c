"""Following a job: ``JobLogs.follow`` reads the status before the lines, so every follower
(the cell, ``logs -f``, ``run``, the log stream) gets every line once and stops only at the end."""

from __future__ import annotations

import subprocess
import sys

from jupyter_disttrain import api
from jupyter_disttrain.jobs.manager import manager_for
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

# Output until the very end, the last line without its newline: written just before the exit.
CHATTY = """
import os, sys, time
rank = os.environ["RANK"]
for i in range(40):
    print(f"{rank}:{i}", flush=True)
    time.sleep(0.02)
sys.stdout.write(f"{rank}:last")
"""
EXPECTED = {r: [f"{r}:{i}" for i in range(40)] + [f"{r}:last"] for r in (0, 1)}


def test_small_pages_get_every_line_once_and_end_with_the_job(store: JobStore) -> None:
    job = api.submit(CHATTY, store=store, gpus=2)
    manager = manager_for(store)
    got: dict[int, list[str]] = {0: [], 1: []}
    offset = None
    while True:
        page = manager.logs.follow(job.id, offset, limit=7)  # many pages, most of them cut by the limit
        for line in page.lines():
            if line.rank is not None:
                got[line.rank].append(line.text)
        if page.done:
            break
        assert not (page.page.more and page.done)
        offset = page.page.offset or offset
    assert page.status.phase is JobPhase.SUCCEEDED
    assert got == EXPECTED


def test_job_follow_pages_until_the_end(store: JobStore) -> None:
    job = api.submit(CHATTY, store=store, gpus=2)
    pages = list(job.follow(tail=5))
    assert pages[-1].done and pages[-1].status.is_terminal
    assert not any(page.done for page in pages[:-1])
    lines = [ln.text for page in pages for ln in page.lines() if ln.rank == 1]
    assert lines == EXPECTED[1][-len(lines) :] and lines[-1] == "1:last"


def test_cli_logs_follow_prints_everything_and_exits_with_the_job(store: JobStore) -> None:
    job = api.submit(CHATTY, store=store, gpus=2)
    cli = [sys.executable, "-m", "jupyter_disttrain.cli", "--root", str(store.root)]
    run = subprocess.run(
        [*cli, "logs", job.id, "--replica", "rank-0", "--follow"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == EXPECTED[0]
    assert job.status().phase is JobPhase.SUCCEEDED
