"""The REST API over a job root with odd directories, links, huge lines and bad env names
(issue 9: 4, 5, 6, 9, 10, 14), against a real Jupyter server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_disttrain.backends.local.devices import cpu_count
from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus
from jupyter_disttrain.storage.logfiles import CUT_MARKER, MAX_LINE
from jupyter_disttrain.storage.store import JobRecord, JobStore

from .conftest import parse_sse

ANSWER_LIMIT = 8_000_000  # bytes: the most any one answer may carry


def finished_job(root: Path, log: bytes = b"hello\n", name: str = "done") -> str:
    store = JobStore(root)
    job_id = store.new_job_id(name)
    store.create(JobRecord(id=job_id, spec=JobSpec(name=name)), "print('hi')\n")
    store.write_status(JobStatus(job_id=job_id, phase=JobPhase.SUCCEEDED))
    (store.logs_dir(job_id) / "rank-0.log").write_bytes(log)
    return job_id


async def fetch_error(jp_fetch: Any, *parts: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("disttrain", "api", *parts, **kwargs)
    assert err.value.response is not None
    return err.value.code, json.loads(err.value.response.body)


async def test_a_copied_job_dir_does_not_break_the_list(jp_fetch: Any, job_root: Path) -> None:
    job_id = finished_job(job_root)
    shutil.copytree(job_root / job_id, job_root / "copy-zzzzz")
    (job_root / "Not A Job").mkdir()
    response = await jp_fetch("disttrain", "api", "jobs")
    assert [j["id"] for j in json.loads(response.body)["jobs"]] == [job_id]
    code, body = await fetch_error(jp_fetch, "jobs", "copy-zzzzz")
    assert code == 404 and "renamed, copied or moved" in body["message"]


async def test_links_never_serve_files_outside_the_job(jp_fetch: Any, job_root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    job_id = finished_job(job_root)
    (job_root / job_id / "logs" / "x.log").symlink_to(secret)
    (job_root / job_id / "train.py").unlink()
    (job_root / job_id / "train.py").symlink_to(secret)
    response = await jp_fetch("disttrain", "api", "jobs", job_id, "logs")
    assert b"SECRET" not in response.body
    assert [ln["text"] for ln in json.loads(response.body)["lines"]] == ["hello"]
    code, body = await fetch_error(jp_fetch, "jobs", job_id, "logs", params={"replica": "x"})
    assert code == 400
    code, body = await fetch_error(jp_fetch, "jobs", job_id, "script")
    assert code == 404 and "symbolic link" in body["message"]
    # A linked status is not read either, and does not break the job's other routes.
    outside = tmp_path / "status.json"
    outside.write_text(json.dumps({"job_id": job_id, "phase": "Failed", "reason": "FROM-OUTSIDE"}))
    (job_root / job_id / "status.json").unlink()
    (job_root / job_id / "status.json").symlink_to(outside)
    for route in ((job_id,), (job_id, "logs"), ()):
        response = await jp_fetch("disttrain", "api", "jobs", *route)
        assert b"FROM-OUTSIDE" not in response.body


async def test_delete_of_a_linked_job_dir_never_touches_its_target(
    jp_fetch: Any, job_root: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other-root"
    victim = finished_job(other, name="victim")
    job_root.mkdir(parents=True, exist_ok=True)
    (job_root / victim).symlink_to(other / victim)
    before = sorted(p.name for p in (other / victim).iterdir())
    for purge in ("false", "true"):
        code, body = await fetch_error(jp_fetch, "jobs", victim, method="DELETE", params={"purge": purge})
        assert code == 404 and "symbolic link" in body["message"]
    assert sorted(p.name for p in (other / victim).iterdir()) == before
    response = await jp_fetch("disttrain", "api", "jobs")
    assert json.loads(response.body)["jobs"] == []


async def test_reserved_env_names_and_too_many_processes_answer_400(jp_fetch: Any, job_root: Path) -> None:
    for key in ("RANK", "DISTTRAIN_JOB_ID", "MASTER_PORT"):
        spec = {"env": {key: "1"}, "accelerator": "cpu"}
        code, body = await fetch_error(
            jp_fetch, "jobs", method="POST", body=json.dumps({"script": "print(1)", "spec": spec})
        )
        assert code == 400 and f"env '{key}'" in body["message"]
    many = cpu_count() + 1
    spec = {"nproc_per_node": many, "accelerator": "cpu"}
    code, body = await fetch_error(
        jp_fetch, "jobs", method="POST", body=json.dumps({"script": "print(1)", "spec": spec})
    )
    assert (
        code == 400 and f"starts {many} processes" in body["message"] and "--oversubscribe" in body["message"]
    )
    for entrypoint in ("job.json", "logs/rank-0.log", "../x.py"):
        code, body = await fetch_error(
            jp_fetch,
            "jobs",
            method="POST",
            body=json.dumps({"script": "print(1)", "spec": {"entrypoint": entrypoint}}),
        )
        assert code == 400 and "entrypoint" in body["message"]
    assert not job_root.exists() or list(job_root.iterdir()) == []


async def test_log_answers_are_bounded_in_bytes_and_resume_exactly(jp_fetch: Any, job_root: Path) -> None:
    # 12 MB of invalid UTF-8 with no newline, then a normal line: every answer stays small and
    # the answers, chained by offset, cover every byte exactly once.
    size = 12_000_000
    data = bytes(range(128, 256)) * (size // 128) + b"\nthe end\n"
    job_id = finished_job(job_root, data)
    offset, pieces, answers = "", [], 0
    while True:
        params = {"limit": "10000", **({"offset": offset} if offset else {})}
        response = await jp_fetch("disttrain", "api", "jobs", job_id, "logs", params=params)
        assert len(response.body) < ANSWER_LIMIT
        chunk = json.loads(response.body)
        answers += 1
        pieces += [ln["text"] for ln in chunk["lines"]]
        if chunk["done"]:
            assert not chunk["more"]
            break
        assert chunk["more"] and chunk["lines"], "not done, yet nothing new"
        offset = chunk["offset"]
    assert answers > 2 and pieces[-1] == "the end" and chunk["offset"] == f"rank-0:{len(data)}"
    assert all(p.endswith(CUT_MARKER) for p in pieces[:-2])
    assert sum(len(p.removesuffix(CUT_MARKER)) for p in pieces[:-1]) == size  # one U+FFFD per byte
    # The stream too: every event is small, and it ends at the file's end.
    response = await jp_fetch("disttrain", "api", "jobs", job_id, "logs", "stream", request_timeout=120)
    events = parse_sse(response.body.decode())
    sizes = [len(block) for block in response.body.split(b"\n\n")]
    assert max(sizes) < ANSWER_LIMIT
    lines = [t for ev, _, d in events if ev == "lines" for r in d["runs"] for t in r["lines"]]
    assert lines[-1] == "the end" and len(lines) == len(pieces)
    assert events[-1][0] == "end"


async def test_tail_of_a_progress_bar_is_its_latest_state(jp_fetch: Any, job_root: Path) -> None:
    bar = b"".join(f"\r{i:>6}/100000".encode() for i in range(100_000)) + b"\r"
    job_id = finished_job(job_root, b"start\n" + bar)
    response = await jp_fetch("disttrain", "api", "jobs", job_id, "logs", params={"tail": "1"})
    (line,) = json.loads(response.body)["lines"]
    assert line["text"] == " 99999/100000\r"
    assert len(bar) > MAX_LINE  # so the tail crosses a piece boundary


async def test_reading_a_lost_launchers_job_writes_nothing(jp_fetch: Any, job_root: Path) -> None:
    store = JobStore(job_root)
    job_id = store.new_job_id("lost")
    store.create(JobRecord(id=job_id, spec=JobSpec(name="lost")), "print(1)\n")
    store.write_status(JobStatus(job_id=job_id, phase=JobPhase.RUNNING))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (job_root / job_id / "launcher.json").write_text(json.dumps({"pid": dead.pid, "start_time": 1.0}))
    before = (job_root / job_id / "status.json").stat()
    job = json.loads((await jp_fetch("disttrain", "api", "jobs", job_id)).body)
    assert job["status"]["reason"] == "LauncherLost"
    await jp_fetch("disttrain", "api", "jobs", job_id, "logs")
    await jp_fetch("disttrain", "api", "jobs")
    after = (job_root / job_id / "status.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
