"""The job list (and a job's summary) flags a running job's quiet replicas: a real two-rank job
whose rank 0 keeps printing and whose rank 1 prints a few lines, then sleeps in ``stuck_here``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from jupyter_disttrain.api import submit
from jupyter_disttrain.storage.store import JobStore

from .conftest import poll

SCRIPT = textwrap.dedent(
    """
    import os, time

    def stuck_here():
        time.sleep(600)

    if os.environ["RANK"] == "0":
        while True:
            print("step", flush=True)
            time.sleep(0.5)
    else:
        for _ in range(8):
            print("step", flush=True)
            time.sleep(0.5)
        stuck_here()
    """
).lstrip()


async def test_the_listing_names_the_stuck_rank(jp_fetch: Any, job_root: Path) -> None:
    sampled = {"monitor_interval": 0.5}  # outputs noted often enough to learn rank 1's interval
    job = submit(SCRIPT, store=JobStore(job_root), name="quiet", gpus=2, accelerator="cpu", options=sampled)
    try:

        async def summary() -> Any:
            response = await jp_fetch("disttrain", "api", "jobs")
            return next(j for j in json.loads(response.body)["jobs"] if j["id"] == job.id)

        first = await summary()
        assert first["quiet"] == []  # just started: nobody has been silent yet
        flagged = await poll(
            lambda: _quiet(summary), "rank-1 flagged quiet in the list", deadline=150, every=1.0
        )
        assert flagged["phase"] == "Running"
        assert flagged["quiet"] == ["rank-1"]  # rank 0 still prints
        detail = json.loads((await jp_fetch("disttrain", "api", "jobs", job.id)).body)
        assert detail["summary"]["quiet"] == ["rank-1"]  # the details' summary says the same
    finally:
        job.cancel()
    ended = await summary()
    assert ended["phase"] == "Cancelled" and ended["quiet"] == []


async def _quiet(summary: Any) -> Any:
    answer = await summary()
    return answer if answer["quiet"] else None
