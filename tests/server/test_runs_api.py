"""The runs API over a real 2-rank job that used ``em``: list, detail pages, artifact downloads,
and what a planted link, a bad name or a half-written line gets."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_disttrain.storage.store import JobStore

from .conftest import run_checkout_job

STEPS = 30
PAYLOAD = bytes(range(256)) * 4096 + b"tail"  # 1 MiB and a bit: more than one download chunk

SCRIPT = f"""
import math, os, time
from jupyter_disttrain import em

job_dir = os.environ["DISTTRAIN_JOB_DIR"]
run = em.create_run("mnist", hparams={{"lr": 0.1, "opt": "sgd"}}, total_steps=100)
for step in range({STEPS}):
    run.log("train", {{"loss": 1.0 / (step + 1)}}, step=step, epoch=step // 10)
run.log("val", {{"acc": float("nan"), "top5": math.inf}}, step={STEPS - 1})
run.log("train", {{"loss": 0.5}}, step=3)  # backwards: kept and flagged
with open(os.path.join(job_dir, "weights.bin"), "wb") as f:
    f.write({PAYLOAD!r})
art = em.create_artifact("checkpoint")
art.add_file(os.path.join(job_dir, "weights.bin"), name="model.pt")
art.add_file(os.path.join(job_dir, "weights.bin"), name="sub/dir/copy.bin")
run.mark_output(art)
run.finish()

each = em.create_run("per-rank", hparams={{"max_steps": 10}}, ranks="all")
each.log("train", {{"loss": float(os.environ["RANK"])}}, step=0)
each.finish()

open_run = em.create_run("killed", hparams={{"total_steps": 50}})
open_run.log("train", {{"loss": 2.0}}, step=1)
open_run._flush()
if os.environ["RANK"] == "0":
    os._exit(0)  # no finish, no atexit: the run stays "running" in its record
"""


@pytest.fixture
def job_root(shared_root: Path) -> Path:
    return shared_root


@pytest.fixture(scope="module")
def em_job(shared_root: Path) -> str:
    return run_checkout_job(shared_root, SCRIPT, "tracked")


@pytest.fixture(scope="module")
def plain_job(shared_root: Path) -> str:
    """A job whose script never calls em, with hparams given and arguments after --."""
    hparams = {"lr": 0.3, "total_steps": 7}
    return run_checkout_job(
        shared_root, "print('no em here')\n", "plain", 1, hparams=hparams, args=["--epochs", "2"]
    )


def run_dir(root: Path, job_id: str, run: str = "mnist") -> Path:
    return JobStore(root).job_dir(job_id) / "runs" / run


async def get_json(jp_fetch: Any, *parts: str, **kwargs: Any) -> Any:
    response = await jp_fetch("disttrain", "api", *parts, **kwargs)
    return json.loads(response.body)


async def status_of(jp_fetch: Any, *parts: str, **kwargs: Any) -> tuple[int, str]:
    try:
        response = await jp_fetch("disttrain", "api", *parts, **kwargs)
    except HTTPClientError as exc:
        body = exc.response.body.decode() if exc.response is not None else ""
        return exc.code, body
    return response.code, ""


async def all_points(jp_fetch: Any, job_id: str, run: str, limit: int, **params: Any) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    since = 0
    for _ in range(200):
        page = await get_json(
            jp_fetch, "jobs", job_id, "runs", run, params={"since": since, "limit": limit, **params}
        )
        points += page["points"]
        assert len(page["points"]) <= limit
        if not page["more"]:
            return points
        assert page["next"] > since
        since = page["next"]
    raise AssertionError("pages never ended")


async def test_runs_list_every_run_with_hparams_last_metrics_and_progress(
    jp_fetch: Any, em_job: str, shared_root: Path
) -> None:
    runs = (await get_json(jp_fetch, "runs"))["runs"]
    mine = {r["run"]: r for r in runs if r["job_id"] == em_job}
    assert set(mine) == {"mnist", "per-rank", "killed"}
    mnist = mine["mnist"]
    assert mnist["job_name"] == "tracked" and mnist["job_phase"] == "Succeeded"
    assert mnist["status"] == "finished" and mnist["start_time"] and mnist["end_time"]
    assert mnist["hparams"] == {"lr": 0.1, "opt": "sgd"}
    assert mnist["metrics"] == {"train/loss": 0.5, "val/acc": "NaN", "val/top5": "Infinity"}
    assert (mnist["step"], mnist["total_steps"], mnist["eta_seconds"]) == (3, 100, None)
    assert mnist["artifacts"] == 1
    assert mnist["tensorboard_run"] == f"{em_job}/tensorboard/mnist"
    assert (shared_root / mnist["tensorboard_run"]).is_dir()  # relative to the _all TensorBoard's dir
    # Its total from an hparam; a killed process leaves its run open, the job's end shows it.
    assert mine["per-rank"]["total_steps"] == 10 and mine["per-rank"]["metrics"] == {"train/loss": 0.0}
    assert mine["killed"]["status"] == "interrupted" and mine["killed"]["total_steps"] == 50
    assert mine["killed"]["metrics"] == {"train/loss": 2.0} and mine["killed"]["step"] == 1

    only = (await get_json(jp_fetch, "runs", params={"job": em_job}))["runs"]
    assert sorted(r["run"] for r in only) == ["killed", "mnist", "per-rank"]
    assert (await status_of(jp_fetch, "runs", params={"job": "no-such-job"}))[0] == 404
    assert (await status_of(jp_fetch, "runs", params={"job": "../x"}))[0] == 400


async def test_a_job_without_runs_shows_its_captured_hparams_as_its_job_run(
    jp_fetch: Any, plain_job: str
) -> None:
    (row,) = (await get_json(jp_fetch, "runs", params={"job": plain_job}))["runs"]
    assert row["run"] == "_job" and row["status"] == "finished" and row["job_phase"] == "Succeeded"
    assert row["hparams"] == {"lr": 0.3, "total_steps": 7, "epochs": 2}
    assert row["total_steps"] == 7 and row["metrics"] == {} and row["start_time"] and row["end_time"]
    assert row["tensorboard_run"] == f"{plain_job}/tensorboard"
    page = await get_json(jp_fetch, "jobs", plain_job, "runs", "_job")
    assert page["record"]["hparams"] == row["hparams"] and page["points"] == []
    assert (page["status"], page["progress"]["total_steps"]) == ("finished", 7)


async def test_detail_pages_return_every_point_once_with_flags(
    jp_fetch: Any, em_job: str, shared_root: Path
) -> None:
    lines = (run_dir(shared_root, em_job) / "metrics.jsonl").read_text().splitlines()
    for limit in (7, 5000):
        points = await all_points(jp_fetch, em_job, "mnist", limit)
        assert len(points) == len(lines) == STEPS + 3
        assert [p["step"] for p in points if p["type"] == "train"] == [*range(STEPS), 3]
        assert [p["flags"] for p in points][-1] == ["step_backwards"]
        assert sum(1 for p in points if p["flags"]) == 1
        nonfinite = {p["name"]: p["value"] for p in points if p["type"] == "val"}
        assert nonfinite == {"acc": "NaN", "top5": "Infinity"}
    page = await get_json(jp_fetch, "jobs", em_job, "runs", "mnist")
    assert page["record"]["hparams"] == {"lr": 0.1, "opt": "sgd"} and page["status"] == "finished"
    assert page["progress"] == {"step": 3, "total_steps": 100, "eta_seconds": None}
    assert page["ranks"] == []
    assert {a["path"]: a["size"] for a in page["artifacts"]} == {
        "checkpoint/model.pt": len(PAYLOAD),
        "checkpoint/sub/dir/copy.bin": len(PAYLOAD),
    }
    assert all(a["name"] == "checkpoint" and len(a["sha256"]) == 64 for a in page["artifacts"])


async def test_each_ranks_metrics_of_a_run_recorded_by_every_rank(jp_fetch: Any, em_job: str) -> None:
    page = await get_json(jp_fetch, "jobs", em_job, "runs", "per-rank")
    assert page["ranks"] == [0, 1]
    assert [p["value"] for p in page["points"]] == [0.0]
    page = await get_json(jp_fetch, "jobs", em_job, "runs", "per-rank", params={"rank": 1})
    assert [p["value"] for p in page["points"]] == [1.0]
    code, body = await status_of(jp_fetch, "jobs", em_job, "runs", "per-rank", params={"rank": 2})
    assert code == 400 and "rank" in body
    assert (await status_of(jp_fetch, "jobs", em_job, "runs", "mnist", params={"rank": 1}))[0] == 400


async def test_a_half_written_last_line_waits_for_its_end(
    jp_fetch: Any, em_job: str, shared_root: Path
) -> None:
    path = run_dir(shared_root, em_job, "killed") / "metrics.jsonl"
    size = path.stat().st_size
    line = '{"type":"train","name":"loss","value":1.5,"step":2,"epoch":null,"time":1.0}\n'
    with open(path, "a") as f:
        f.write(line[:30])
    page = await get_json(jp_fetch, "jobs", em_job, "runs", "killed", params={"since": 0})
    assert [p["value"] for p in page["points"]] == [2.0]
    assert page["next"] == size and page["more"] is False
    with open(path, "a") as f:
        f.write(line[30:])
    page = await get_json(jp_fetch, "jobs", em_job, "runs", "killed", params={"since": size})
    assert [(p["value"], p["step"]) for p in page["points"]] == [(1.5, 2)]
    assert page["next"] == size + len(line)
    page = await get_json(jp_fetch, "jobs", em_job, "runs", "killed", params={"since": page["next"]})
    assert page["points"] == [] and page["more"] is False


async def test_bad_since_limit_and_rank_are_400(jp_fetch: Any, em_job: str) -> None:
    for params in ({"since": -1}, {"since": "x"}, {"limit": 0}, {"limit": 10**6}, {"rank": "one"}):
        code, body = await status_of(jp_fetch, "jobs", em_job, "runs", "mnist", params=params)
        assert code == 400, params
        assert next(iter(params)) in json.loads(body)["message"], body


async def test_artifact_downloads_byte_identical(jp_fetch: Any, em_job: str) -> None:
    for path in ("checkpoint/model.pt", "checkpoint/sub/dir/copy.bin"):
        response = await jp_fetch(
            "disttrain", "api", "jobs", em_job, "runs", "mnist", "artifacts", *path.split("/")
        )
        assert response.body == PAYLOAD
        assert response.headers["Content-Type"] == "application/octet-stream"
        name = path.rsplit("/", 1)[-1]
        assert response.headers["Content-Disposition"] == f"attachment; filename*=UTF-8''{name}"


# Sent as they are (jp_fetch would escape the %): tornado decodes them once, so %2F is a slash
# inside one path part and %2E%2E a "..".
BAD_RUNS = ["..", "%2E%2E", "a%20b", "-x", "a" * 101, "x%2F..%2F..", "%00", "mnist%2F..%2Fkilled"]
BAD_PATHS = [
    "checkpoint/..%2F..%2Frun.json",
    "checkpoint/%2E%2E/%2E%2E/run.json",
    "..%2Frun.json",
    "%2E%2E/%2E%2E/run.json",
    "checkpoint/.",
    "checkpoint",
    "%2Fetc%2Fpasswd",
    "checkpoint/a%5Cb",
    "checkpoint/%00",
    "checkpoint//model.pt",
]


@pytest.fixture
def raw_status(http_server_client: Any, jp_auth_header: Any, jp_base_url: str, em_job: str) -> Any:
    async def status(path: str) -> int:
        url = f"{jp_base_url}disttrain/api/jobs/{em_job}/runs/{path}"
        response = await http_server_client.fetch(url, headers=jp_auth_header, raise_error=False)
        return int(response.code)

    return status


async def test_bad_names_are_400_and_unknown_ones_404(jp_fetch: Any, em_job: str, raw_status: Any) -> None:
    wrong = []
    for bad in BAD_RUNS:
        for suffix in ("", "/artifacts/checkpoint/model.pt"):
            code = await raw_status(bad + suffix)
            if code not in (400, 404):
                wrong.append((bad, suffix, code))
    for bad in BAD_PATHS:
        code = await raw_status(f"mnist/artifacts/{bad}")
        if code not in (400, 404):
            wrong.append(("mnist", bad, code))
    assert not wrong
    assert await raw_status("a%20b") == 400
    assert await raw_status("mnist/artifacts/..%2Fx/y") == 400
    for unknown in ("no-such-run", "mnist/artifacts/checkpoint/nope.pt", "mnist/artifacts/nope/x"):
        assert await raw_status(unknown) == 404, unknown
    # The manifest is the runs code's, not one of the artifact's files.
    assert await raw_status("mnist/artifacts/checkpoint/manifest.json") == 404
    assert (await status_of(jp_fetch, "jobs", "no-such-job", "runs", "mnist"))[0] == 404


async def test_planted_links_are_never_followed(
    jp_fetch: Any, em_job: str, shared_root: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    outside = tmp_path / "outside"
    (outside / "checkpoint").mkdir(parents=True)
    (outside / "checkpoint" / "model.pt").write_text("not yours either")
    (outside / "run.json").write_text(json.dumps({"name": "x", "hparams": {"stolen": 1}}))
    mnist = run_dir(shared_root, em_job)
    links = [
        (mnist / "artifacts" / "checkpoint" / "leak.pt", secret),  # a file link
        (mnist / "artifacts" / "evil", outside / "checkpoint"),  # an artifact dir link
        (mnist / "artifacts" / "checkpoint" / "sub" / "up", outside),  # a dir link deeper down
        (mnist.parent / "linked", outside),  # a run dir link
    ]
    for link, target in links:
        os.symlink(target, link)
    try:
        for path in ("checkpoint/leak.pt", "evil/model.pt", "checkpoint/sub/up/checkpoint/model.pt"):
            code, _ = await status_of(
                jp_fetch, "jobs", em_job, "runs", "mnist", "artifacts", *path.split("/")
            )
            assert code == 404, path
        assert (await status_of(jp_fetch, "jobs", em_job, "runs", "linked"))[0] == 404
        runs = (await get_json(jp_fetch, "runs", params={"job": em_job}))["runs"]
        assert "linked" not in {r["run"] for r in runs}
        page = await get_json(jp_fetch, "jobs", em_job, "runs", "mnist")
        assert {a["name"] for a in page["artifacts"]} == {"checkpoint"}
    finally:
        for link, _ in links:
            link.unlink()
