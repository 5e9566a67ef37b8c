"""A real TensorBoard behind the proxy: on demand, live reload, restart on crash, loopback only."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psutil
import pytest
from tornado.httpclient import HTTPClientError

from jupyter_disttrain.model.specs import JobSpec
from jupyter_disttrain.server.context import SETTINGS_KEY
from jupyter_disttrain.storage.store import JobRecord, JobStore

from .conftest import poll

TAG = "train/loss"


def make_job(root: Path, name: str = "tb") -> str:
    """A job record with its directories; TensorBoard needs nothing more than its log dir."""
    store = JobStore(root)
    record = JobRecord(id=store.new_job_id(name), spec=JobSpec(name=name))
    store.create(record, "print(1)\n")
    return record.id


def write_scalars(logdir: Path, steps: range) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(logdir))
    for step in steps:
        writer.add_scalar(TAG, 1.0 / (step + 1), step)
    writer.flush()
    writer.close()


async def tb_json(jp_fetch: Any, tb_id: str, *path: str, **kwargs: Any) -> Any:
    response = await jp_fetch("disttrain", "tensorboard", tb_id, *path, request_timeout=60, **kwargs)
    return json.loads(response.body)


def listening_addresses(pid: int) -> set[str]:
    proc = psutil.Process(pid)
    addrs = set()
    for p in [proc, *proc.children(recursive=True)]:
        for conn in p.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                addrs.add(conn.laddr.ip)
    return addrs


async def test_new_points_show_up_through_the_proxy(jp_fetch: Any, job_root: Path, jp_serverapp: Any) -> None:
    job_id = make_job(job_root)
    started = json.loads(
        (await jp_fetch("disttrain", "api", "tensorboard", job_id, method="POST", body="")).body
    )
    assert started["running"] and started["url"].endswith(f"/disttrain/tensorboard/{job_id}/")
    assert listening_addresses(started["pid"]) == set()  # a Unix socket only: no TCP port at all

    page = await jp_fetch("disttrain", "tensorboard", f"{job_id}/", request_timeout=60)
    assert page.code == 200 and b"<tb-webapp>" in page.body
    assert "frame-ancestors 'self'" in " ".join(page.headers.get_list("Content-Security-Policy"))
    assert await tb_json(jp_fetch, job_id, "data", "plugin", "scalars", "tags") == {}
    # Written after TensorBoard started: picked up by its reload, no restart.
    run_dir = job_root / job_id / "tensorboard" / "run1"
    await asyncio.get_running_loop().run_in_executor(None, write_scalars, run_dir, range(3))

    async def tag_seen() -> Any:
        tags = await tb_json(jp_fetch, job_id, "data", "plugin", "scalars", "tags")
        return TAG in tags.get("run1", {})

    await poll(tag_seen, "the new scalar through the proxy")
    points = await tb_json(
        jp_fetch, job_id, "data", "plugin", "scalars", "scalars", params={"run": "run1", "tag": TAG}
    )
    assert [p[1] for p in points] == [0, 1, 2]
    # TensorBoard's POST data endpoints go through the proxy too.
    body = urlencode([("tag", TAG), ("runs", "run1")])
    multi = await tb_json(
        jp_fetch, job_id, "data", "plugin", "scalars", "scalars_multirun", method="POST", body=body
    )
    assert [p[1] for p in multi["run1"]] == [0, 1, 2]

    # Reload restarts it and every point on disk is there when it answers.
    await asyncio.get_running_loop().run_in_executor(
        None, write_scalars, job_root / job_id / "tensorboard" / "run2", range(2)
    )
    reloaded = json.loads(
        (await jp_fetch("disttrain", "api", "tensorboard", job_id, "reload", method="POST", body="")).body
    )
    assert reloaded["running"] and reloaded["pid"] != started["pid"]
    assert (
        not psutil.pid_exists(started["pid"])
        or psutil.Process(started["pid"]).status() == psutil.STATUS_ZOMBIE
    )

    async def both_runs() -> Any:
        runs = await tb_json(jp_fetch, job_id, "data", "runs")
        return {"run1", "run2"} <= set(runs)

    await poll(both_runs, "both runs after reload")

    # A crash is repaired: the supervisor starts it again and the proxy keeps working.
    os.kill(reloaded["pid"], signal.SIGKILL)

    async def restarted() -> Any:
        info = json.loads((await jp_fetch("disttrain", "api", "tensorboard", job_id)).body)
        if not info["running"] or info["pid"] == reloaded["pid"]:
            return None
        try:
            return await tb_json(jp_fetch, job_id, "data", "runs")
        except HTTPClientError:
            return None

    assert "run1" in await poll(restarted, "TensorBoard back after a crash")

    # Stopped at server shutdown (stop_extension calls stop_all).
    info = json.loads((await jp_fetch("disttrain", "api", "tensorboard")).body)["tensorboards"]
    pids = [t["pid"] for t in info if t["running"]]
    assert pids
    await jp_serverapp.web_app.settings[SETTINGS_KEY].tensorboard.stop_all()
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_tensorboard_over_all_jobs_and_stop(jp_fetch: Any, job_root: Path) -> None:
    first, second = make_job(job_root, "aa"), make_job(job_root, "bb")
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, write_scalars, job_root / first / "tensorboard", range(2))
    await loop.run_in_executor(None, write_scalars, job_root / second / "tensorboard", range(2))

    async def runs() -> Any:
        found = await tb_json(jp_fetch, "_all", "data", "runs")
        return {f"{first}/tensorboard", f"{second}/tensorboard"} <= set(found)

    await poll(runs, "runs of both jobs in the all-jobs TensorBoard")
    response = await jp_fetch("disttrain", "api", "tensorboard", "_all", method="DELETE")
    assert response.code == 204
    info = json.loads((await jp_fetch("disttrain", "api", "tensorboard", "_all")).body)
    assert info["running"] is False


async def test_proxy_without_token_is_403(jp_fetch: Any, job_root: Path) -> None:
    job_id = make_job(job_root)
    for path in ((), ("data", "runs")):
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch("disttrain", "tensorboard", job_id, *path, headers={"Authorization": ""})
        assert info.value.code == 403


TWO_WRITERS = """
import sys, time
from torch.utils.tensorboard import SummaryWriter
a = SummaryWriter(sys.argv[1], filename_suffix=".a")  # e.g. the user's writer
b = SummaryWriter(sys.argv[1], filename_suffix=".b")  # and a logger's, in the same run dir
for step in range(int(sys.argv[2])):
    for writer, tag in ((a, "w/a"), (b, "w/b")):
        writer.add_scalar(tag, float(step), step)
        writer.flush()
        time.sleep(0.25)
a.close(); b.close()
"""


async def test_every_writer_of_a_run_keeps_showing_new_points(jp_fetch: Any, job_root: Path) -> None:
    # Without --reload_multifile TensorBoard follows only the newest event file of a run:
    # the older writer's tag stops gaining points while the job runs.
    job_id = make_job(job_root, "multi")
    started = await jp_fetch("disttrain", "api", "tensorboard", job_id, method="POST", body="")
    info = json.loads(started.body)
    cmdline = psutil.Process(info["pid"]).cmdline()
    assert "--reload_multifile=true" in cmdline and "--reload_multifile_inactive_secs" in cmdline
    steps = 24
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", TWO_WRITERS, str(job_root / job_id / "tensorboard" / "run"), str(steps)
    )

    async def last_steps() -> dict[str, int]:
        out = {}
        for tag in ("w/a", "w/b"):
            try:
                query = {"run": "run", "tag": tag}
                points = await tb_json(jp_fetch, job_id, "data", "plugin", "scalars", "scalars", params=query)
            except HTTPClientError:
                points = []
            out[tag] = max((p[1] for p in points), default=-1)
        return out

    seen: list[dict[str, int]] = []
    while writer.returncode is None:
        seen.append(await last_steps())
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(writer.wait(), timeout=1.0)
    assert writer.returncode == 0

    async def all_points() -> Any:
        last = await last_steps()
        return last if last == {"w/a": steps - 1, "w/b": steps - 1} else None

    await poll(all_points, "both writers' last points", deadline=30)
    for tag in ("w/a", "w/b"):  # and it kept gaining points while they were written
        assert len({s[tag] for s in seen if s[tag] >= 0}) >= 3, (tag, seen)


async def test_page_fonts_through_the_proxy(jp_fetch: Any, job_root: Path, jp_base_url: Any) -> None:
    """TensorBoard's page names its fonts from the site's root (Jupyter's, 404 there): the proxy
    points them under TensorBoard's prefix, where each one is served (issue 28, item 7)."""
    import re

    job_id = make_job(job_root)
    response = await jp_fetch("disttrain", "tensorboard", job_id, "index.html", request_timeout=60)
    page = response.body.decode()
    assert "url(/font-roboto/" not in page
    prefix = f"{jp_base_url}disttrain/tensorboard/{job_id}/"
    fonts = re.findall(r"url\(([^)]*font-roboto/[^)]+)\)", page)
    assert len(fonts) > 10 and all(font.startswith(prefix) for font in fonts)
    font = await jp_fetch(*fonts[0][len(jp_base_url) :].split("/"), request_timeout=60)
    assert font.code == 200 and font.body[:4] == b"wOF2"
