"""The jobs API over real local torchrun jobs: list, describe, logs, follow, submit, delete."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_disttrain.api import submit
from jupyter_disttrain.model.specs import JobSpec, JobStatus
from jupyter_disttrain.packaging import package_cell
from jupyter_disttrain.storage.store import JobRecord, JobStore

from .conftest import LINES, parse_sse, poll, submit_job


@pytest.fixture
def job_root(shared_root: Path) -> Path:
    # The module's tests share one store, so one finished job serves several of them.
    return shared_root


async def get_json(jp_fetch: Any, *parts: str, **kwargs: Any) -> Any:
    response = await jp_fetch("disttrain", "api", *parts, **kwargs)
    return json.loads(response.body)


def assert_every_line_once_in_order(texts_by_rank: dict[int, list[str]], world: int = 2) -> None:
    assert sorted(texts_by_rank) == list(range(world))
    for rank, texts in texts_by_rank.items():
        assert texts == [f"r{rank} line {i}" for i in range(LINES)], f"rank {rank}"


def run_lines(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines of the stream's runs, one dict each as the chunk API gives them."""
    return [{"text": t, "replica": r["replica"], "rank": r["rank"]} for r in runs for t in r["lines"]]


def by_rank(lines: list[dict[str, Any]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for line in lines:
        if line["replica"].startswith("rank-"):
            out.setdefault(line["rank"], []).append(line["text"])
    return out


async def test_python_api_job_is_listed_and_reaches_succeeded(jp_fetch: Any, shared_root: Path) -> None:
    job = submit_job(shared_root, name="listed")

    async def listed() -> Any:
        jobs = (await get_json(jp_fetch, "jobs"))["jobs"]
        return next((j for j in jobs if j["id"] == job.id), None)

    summary = await poll(listed, "the job in the list")
    assert summary["backend"] == "local"
    assert summary["name"] == "listed"
    assert summary["replicas_total"] == 2
    assert summary["gpus"] == 0

    async def succeeded() -> Any:
        detail = await get_json(jp_fetch, "jobs", job.id)
        return detail if detail["status"]["phase"] in ("Succeeded", "Failed", "Cancelled") else None

    detail = await poll(succeeded, "the job to end", deadline=120)
    assert detail["status"]["phase"] == "Succeeded"
    assert detail["summary"]["phase"] == "Succeeded"
    assert detail["spec"]["nproc_per_node"] == 2
    assert detail["deleted"] is False
    assert [r["name"] for r in detail["status"]["replicas"]] == ["rank-0", "rank-1"]
    script = await get_json(jp_fetch, "jobs", job.id, "script")
    assert script["entrypoint"] == "train.py" and 'print(f"r{rank} line {i}"' in script["script"]


async def test_log_chunks_return_every_rank_in_order(jp_fetch: Any, finished_job: str) -> None:
    lines: list[dict[str, Any]] = []
    offset = ""
    for _ in range(100):
        chunk = await get_json(jp_fetch, "jobs", finished_job, "logs", params={"offset": offset, "limit": 7})
        assert len(chunk["lines"]) <= 7
        lines += chunk["lines"]
        offset = chunk["offset"]
        if chunk["done"]:
            break
    assert chunk["done"]
    assert_every_line_once_in_order(by_rank(lines))
    # One replica, and the tail of it.
    one = await get_json(jp_fetch, "jobs", finished_job, "logs", params={"replica": "rank-1", "limit": 1000})
    assert [x["text"] for x in one["lines"]] == [f"r1 line {i}" for i in range(LINES)]
    tail = await get_json(jp_fetch, "jobs", finished_job, "logs", params={"replica": "rank-0", "tail": 3})
    assert [x["text"] for x in tail["lines"]] == [f"r0 line {i}" for i in range(LINES - 3, LINES)]


async def test_follow_stream_of_a_running_job(jp_fetch: Any, shared_root: Path) -> None:
    job = submit_job(shared_root, name="followed")
    response = await jp_fetch("disttrain", "api", "jobs", job.id, "logs", "stream", request_timeout=120)
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events = parse_sse(response.body.decode())
    assert events[-1][0] == "end" and events[-1][2]["phase"] == "Succeeded"
    batches = [data for kind, _, data in events if kind == "lines"]
    assert len(batches) > 1
    for kind, event_id, data in events:
        assert event_id == data["offset"], kind
    for batch in batches:  # a run ends where the next resumes: its offset, then the event's
        assert batch["runs"][-1]["offset"] == batch["offset"]
    assert_every_line_once_in_order(by_rank(run_lines([r for b in batches for r in b["runs"]])))


async def _first_event_then_hang_up(port: int, path: str, auth: str) -> tuple[str, list[dict[str, Any]]]:
    """Read one ``lines`` event from the stream, then drop the connection mid-stream."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: {auth}\r\n\r\n".encode())
    await writer.drain()
    raw = b""
    while b"\n\n" not in raw.partition(b"\r\n\r\n")[2]:
        chunk = await reader.read(1)
        assert chunk, raw
        raw += chunk
    writer.close()
    body = raw.partition(b"\r\n\r\n")[2].decode()
    ((kind, event_id, data),) = parse_sse(body)
    assert kind == "lines" and event_id
    return event_id, run_lines(data["runs"])


async def test_stream_cut_and_resumed_yields_each_line_once(
    jp_fetch: Any, jp_http_port: int, jp_base_url: str, jp_auth_header: dict[str, str], shared_root: Path
) -> None:
    job = submit_job(shared_root, name="resumed")
    path = f"{jp_base_url}disttrain/api/jobs/{job.id}/logs/stream"
    last_id, first = await _first_event_then_hang_up(jp_http_port, path, jp_auth_header["Authorization"])
    assert 0 < len(first) <= 25
    # Reconnect as a browser does: the last event id in Last-Event-ID.
    response = await jp_fetch(
        "disttrain",
        "api",
        "jobs",
        job.id,
        "logs",
        "stream",
        headers={"Last-Event-ID": last_id},
        request_timeout=120,
    )
    rest = run_lines(
        [r for kind, _, d in parse_sse(response.body.decode()) if kind == "lines" for r in d["runs"]]
    )
    assert_every_line_once_in_order(by_rank(first + rest))


async def test_submit_through_the_api(jp_fetch: Any) -> None:
    body = {
        "script": "import os\nprint('hello from', os.environ['RANK'])\n",
        "spec": {"name": "posted", "accelerator": "cpu"},
    }
    response = await jp_fetch("disttrain", "api", "jobs", method="POST", body=json.dumps(body))
    assert response.code == 201
    answer = json.loads(response.body)
    assert answer["job"]["name"] == "posted" and answer["job"]["backend"] == "local"

    async def ended() -> Any:
        detail = await get_json(jp_fetch, "jobs", answer["id"])
        return detail["status"]["phase"] if detail["summary"]["finish_time"] else None

    assert await poll(ended, "the posted job to end", deadline=120) == "Succeeded"
    detail = await get_json(jp_fetch, "jobs", answer["id"])  # its roles, as the launcher laid them out
    assert (
        detail["roles"] == [{"name": "worker", "replicas": 1}] and detail["summary"]["launcher"] == "torchrun"
    )
    assert [(r["name"], r["role"]) for r in detail["status"]["replicas"]] == [("rank-0", "worker")]
    chunk = await get_json(jp_fetch, "jobs", answer["id"], "logs", params={"replica": "rank-0"})
    assert [x["text"] for x in chunk["lines"]] == ["hello from 0"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("not json", "JSON"),
        (json.dumps({"spec": {}}), '"script"'),
        (json.dumps({"script": "print(1)", "spec": {"gpu": 2}}), "unknown spec field"),
        (json.dumps({"script": "print(1)", "spec": {"name": "Bad_Name"}}), "DNS-1123"),
        (json.dumps({"script": "print(1)", "spec": {"nproc_per_node": 0}}), "--gpus"),
        (json.dumps({"script": "print(1)", "spec": {"backend": "nope"}}), "unknown backend"),
        (json.dumps({"script": "print(1)", "spec": {"launcher": "mpi"}}), "unknown launcher"),
        (
            json.dumps({"script": "print(1)", "spec": {"launcher_options": {"ds_config": "x.json"}}}),
            "the torchrun launcher has no option 'ds_config'",
        ),
    ],
)
async def test_bad_submissions_are_400_with_a_message(jp_fetch: Any, body: str, words: str) -> None:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("disttrain", "api", "jobs", method="POST", body=body)
    assert info.value.code == 400
    assert info.value.response is not None
    message = json.loads(info.value.response.body)["message"]
    assert words in message and "\n" not in message


async def test_cancel_then_delete_keeps_logs_and_purge_removes_them(jp_fetch: Any, shared_root: Path) -> None:
    script = "import time\nprint('started', flush=True)\ntime.sleep(120)\n"
    job = submit_job(shared_root, world=1, script=script, name="sleeper")

    async def started() -> Any:
        chunk = await get_json(jp_fetch, "jobs", job.id, "logs", params={"replica": "rank-0"})
        return chunk["lines"]

    await poll(started, "the first line")
    cancelled = await get_json(jp_fetch, "jobs", job.id, "cancel", method="POST", body="")
    assert cancelled["status"]["phase"] == "Cancelled"

    response = await jp_fetch("disttrain", "api", "jobs", job.id, method="DELETE")
    assert response.code == 204
    jobs = (await get_json(jp_fetch, "jobs"))["jobs"]
    assert job.id not in [j["id"] for j in jobs]
    detail = await get_json(jp_fetch, "jobs", job.id)
    assert detail["deleted"] is True and detail["status"]["phase"] == "Cancelled"
    chunk = await get_json(jp_fetch, "jobs", job.id, "logs", params={"replica": "rank-0"})
    assert [x["text"] for x in chunk["lines"]] == ["started"]

    response = await jp_fetch("disttrain", "api", "jobs", job.id, method="DELETE", params={"purge": "true"})
    assert response.code == 204
    assert not (shared_root / job.id).exists()
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("disttrain", "api", "jobs", job.id, "logs")
    assert info.value.code == 404


async def test_a_backend_that_cannot_load_does_not_break_the_list(jp_fetch: Any, shared_root: Path) -> None:
    store = JobStore(shared_root)
    spec = JobSpec(name="elsewhere", backend="not-installed-backend")
    record = JobRecord(id=store.new_job_id("elsewhere"), spec=spec)
    store.create(record, "print(1)\n")
    store.write_status(JobStatus(job_id=record.id, phase=JobStatus(job_id="x").phase.RUNNING))
    jobs = (await get_json(jp_fetch, "jobs"))["jobs"]
    mine = next(j for j in jobs if j["id"] == record.id)
    assert mine["phase"] == "Running" and mine["backend"] == "not-installed-backend"
    detail = await get_json(jp_fetch, "jobs", record.id)
    assert "unknown backend" in detail["backend_error"]


async def test_a_failed_jobs_detail_tells_its_failure_as_the_notebooks_own_error(
    jp_fetch: Any, shared_root: Path
) -> None:
    """A packaged cell whose rank 1 raises in a helper from an earlier cell: the detail's failure
    names rank-1 and the cells and lines (not train.py's), without the product's frames, keeps
    the raw traceback, and says rank-0 only stopped because rank-1 left; the list's message is
    one line."""
    history = ["import time\n", "def check(rank):\n    if rank == 1:\n        raise ValueError('bad rank')\n"]
    cell = "import os\ncheck(int(os.environ['RANK']))\ntime.sleep(60)\n"
    namespace: dict[str, Any] = {"time": __import__("time")}
    exec(history[1], namespace)
    packaged = package_cell(cell, history, namespace, cell_line=2, cell_label="In [3]")
    job = submit(
        packaged.source,
        files=packaged.files,
        store=JobStore(shared_root),
        name="raises",
        gpus=2,
        accelerator="cpu",
    )
    assert job.wait(timeout=180).phase.value == "Failed"
    detail = await get_json(jp_fetch, "jobs", job.id)
    failure = detail["failure"]
    assert failure["replica"] == "rank-1" and (failure["cell"], failure["line"]) == ("In [2]", 3)
    assert failure["headline"] == "rank-1: ValueError: bad rank (In [2], line 3)"
    shown = re.sub(r"\x1b\[[0-9;]*m", "", failure["traceback"]).split("\n")
    assert "Cell In[3], line 3" in shown and "Cell In[2], line 3, in check()" in shown
    assert "----> 3         raise ValueError('bad rank')" in shown
    assert not any("worker.py" in line or "runpy" in line or "train.py" in line for line in shown)
    assert "train.py" in failure["raw"] and failure["stopped_by_peer"] == ["rank-0"]
    assert detail["status"]["events"][-1]["reason"] == "Error"
    assert all("\n" not in event["message"] for event in detail["status"]["events"])  # headlines
    jobs = (await get_json(jp_fetch, "jobs"))["jobs"]
    assert "\n" not in next(j for j in jobs if j["id"] == job.id)["message"]


async def test_a_plain_tqdm_script_shows_its_progress_in_the_list(jp_fetch: Any, shared_root: Path) -> None:
    """No em, no code changes: the list reads the bar's last redraw off the rank-0 log while the
    job runs (step, total, ETA), and shows none once it has ended."""
    script = (
        "import time\nfrom tqdm import tqdm\n"
        "for i in tqdm(range(100), desc='train', mininterval=0):\n"
        "    time.sleep(0.01 if i < 40 else 120)\n"
    )
    job = submit_job(shared_root, world=1, script=script, name="tqdm")

    async def progress() -> Any:
        jobs = (await get_json(jp_fetch, "jobs"))["jobs"]
        mine = next((j for j in jobs if j["id"] == job.id), None)
        found = (mine or {}).get("progress")
        # tqdm starts each redraw with "\r": the 40/100 one is the log's unended last line, and
        # the reader gives ended lines only, so the bar stalled at 40 reads as 39
        return found if found and found["step"] >= 39 else None

    try:
        found = await poll(progress, "the bar's redraw at 39/100", deadline=120)
        assert (found["total"], found["source"], found["label"]) == (100, "tqdm", "train")
        assert found["eta_seconds"] is not None
        detail = await get_json(jp_fetch, "jobs", job.id)
        assert detail["summary"]["progress"]["step"] in (39, 40)
    finally:
        job.cancel()
    jobs = (await get_json(jp_fetch, "jobs"))["jobs"]
    assert "progress" not in next(j for j in jobs if j["id"] == job.id)
