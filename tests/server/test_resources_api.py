"""Resources and stacks over REST, on one real local job whose ranks are told apart by what they do:
rank 0 holds 300 MB, rank 1 burns CPU while printing, then hangs in ``stuck_here``."""

from __future__ import annotations

import json
import os
import statistics
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_disttrain.api import Job, submit
from jupyter_disttrain.storage.store import JobStore

from .conftest import poll, wait_for

MB = 1 << 20
SCRIPT = textwrap.dedent(
    """
    import os, time
    rank = int(os.environ["RANK"])

    def stuck_here():
        time.sleep(600)

    if rank == 0:
        held = bytearray(300 * 1024 * 1024)
        for i in range(0, len(held), 4096):
            held[i] = 1  # touch every page: resident, not just reserved
        print("holding", flush=True)
        time.sleep(600)
    else:
        start, cpu = time.time(), time.process_time()
        while time.time() - start < 8:
            print("burning", flush=True)
            end = time.time() + 0.3
            while time.time() < end:
                pass
        # What it got of a core: on a loaded machine a busy loop gets less than all of one.
        share = 100 * (time.process_time() - cpu) / (time.time() - start)
        print(f"stuck share={share:.0f}", flush=True)
        stuck_here()
    """
).lstrip()


@pytest.fixture
def job_root(shared_root: Path) -> Path:
    return shared_root


@pytest.fixture(scope="module")
def busy_job(shared_root: Path) -> Iterator[Job]:
    """The job, once both ranks are past their start (rank 1 in ``stuck_here``); cancelled at the end."""
    job = submit(
        SCRIPT,
        store=JobStore(shared_root),
        name="busy",
        gpus=2,
        accelerator="cpu",
        options={"monitor_interval": 0.5},
    )
    logs = job.dir / "logs"

    def said(replica: str, word: str) -> bool:
        try:
            return word in (logs / f"{replica}.log").read_text()
        except OSError:
            return False

    try:
        wait_for(lambda: said("rank-0", "holding") and said("rank-1", "stuck"), 180, "both ranks busy")
        yield job
    finally:
        job.cancel()


async def get_json(jp_fetch: Any, *parts: str, **kwargs: Any) -> Any:
    response = await jp_fetch("disttrain", "api", *parts, **kwargs)
    return json.loads(response.body)


async def stack(jp_fetch: Any, job_id: str, replica: str, **params: str) -> Any:
    return await get_json(
        jp_fetch, "jobs", job_id, "replicas", replica, "stack", method="POST", body="", params=params
    )


async def test_memory_cpu_and_no_gpu_fields(jp_fetch: Any, busy_job: Job) -> None:
    answer = await get_json(jp_fetch, "jobs", busy_job.id, "resources")
    assert answer["source"] == "sampler"
    assert answer["interval"] == 0.5
    assert sorted(answer["replicas"]) == ["rank-0", "rank-1"]
    held = answer["replicas"]["rank-0"]["samples"]
    assert max(s["rss_bytes"] for s in held) >= 300 * MB
    burnt = answer["replicas"]["rank-1"]["samples"]
    busiest = max(s["cpu_percent"] for s in burnt)
    share = float((busy_job.dir / "logs" / "rank-1.log").read_text().split("share=")[1].split()[0])
    # Over 50 % of a core whenever the machine gave the loop that much (it says what it got).
    assert busiest > (50 if share > 60 else 0.6 * share), (busiest, share)
    assert busiest > 5 * statistics.median(s["cpu_percent"] for s in held) + 1  # rank 0 mostly sleeps
    for sample in held + burnt:
        # No GPU here: the GPU fields are absent, not zero and not null.
        assert "gpus" not in sample and "gpu_mem_bytes" not in sample
        assert set(sample) == {"t", "cpu_percent", "rss_bytes", "threads", "read_bytes", "write_bytes"}


async def test_since_gives_only_newer_samples(jp_fetch: Any, busy_job: Job) -> None:
    first = await get_json(jp_fetch, "jobs", busy_job.id, "resources")
    last = max(s["t"] for s in first["replicas"]["rank-0"]["samples"])

    async def newer() -> Any:
        answer = await get_json(jp_fetch, "jobs", busy_job.id, "resources", params={"since": str(last)})
        return answer if answer["replicas"]["rank-0"]["samples"] else None

    answer = await poll(newer, "a newer sample", deadline=30)
    assert all(s["t"] > last for s in answer["replicas"]["rank-0"]["samples"])
    assert answer["now"] >= first["now"]


@pytest.mark.parametrize("method", ["py-spy", "faulthandler"])
async def test_stack_names_the_function_a_rank_is_stuck_in(jp_fetch: Any, busy_job: Job, method: str) -> None:
    dump = await stack(jp_fetch, busy_job.id, "rank-1", method=method)
    assert dump["replica"] == "rank-1"
    assert dump["method"] == method
    assert "stuck_here" in dump["text"], dump["text"]


async def test_auto_stack_falls_back_and_says_why(jp_fetch: Any, busy_job: Job) -> None:
    dump = await stack(jp_fetch, busy_job.id, "rank-0")
    assert dump["method"] in ("py-spy", "faulthandler")
    assert "train.py" in dump["text"]
    assert (dump["note"] is None) == (dump["method"] == "py-spy")


async def test_a_stuck_rank_is_flagged_quiet(jp_fetch: Any, busy_job: Job) -> None:
    async def quiet() -> Any:
        answer = await get_json(
            jp_fetch, "jobs", busy_job.id, "resources", params={"since": str(time.time())}
        )
        return answer if answer["replicas"]["rank-1"]["quiet"] else None

    answer = await poll(quiet, "rank-1 flagged quiet", deadline=120, every=1.0)
    rank1 = answer["replicas"]["rank-1"]
    assert answer["now"] - rank1["last_output"] > 20  # at least the floor
    assert rank1["ended"] is False


async def test_unknown_replica_is_404(jp_fetch: Any, busy_job: Job) -> None:
    with pytest.raises(HTTPClientError) as info:
        await stack(jp_fetch, busy_job.id, "rank-7")
    assert info.value.code == 404
    assert "rank-7" in json.loads(info.value.response.body)["message"]


async def test_bad_since_and_method_are_400(jp_fetch: Any, busy_job: Job) -> None:
    for params in ({"since": "yesterday"}, {"since": "nan"}, {"since": "-1"}):
        with pytest.raises(HTTPClientError) as info:
            await get_json(jp_fetch, "jobs", busy_job.id, "resources", params=params)
        assert info.value.code == 400, params
        assert "since" in json.loads(info.value.response.body)["message"]
    with pytest.raises(HTTPClientError) as info:
        await stack(jp_fetch, busy_job.id, "rank-0", method="gdb")
    assert info.value.code == 400


async def test_stack_of_an_ended_job_is_409_with_its_phase(jp_fetch: Any, finished_job: str) -> None:
    with pytest.raises(HTTPClientError) as info:
        await stack(jp_fetch, finished_job, "rank-0")
    assert info.value.code == 409
    assert "Succeeded" in json.loads(info.value.response.body)["message"]
    # Its samples stay readable, each replica's series ended.
    answer = await get_json(jp_fetch, "jobs", finished_job, "resources")
    assert all(r["ended"] and not r["quiet"] for r in answer["replicas"].values())


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
async def test_a_link_planted_for_the_dump_is_never_followed(
    jp_fetch: Any, busy_job: Job, tmp_path: Path, link: str
) -> None:
    """Someone who can write to the job root swaps ``stacks/rank-1.txt`` for a link to another
    file: the faulthandler route refuses it, and neither empties the file (it is past the size
    at which a dump file is emptied) nor serves its content as the stack."""
    own = busy_job.dir / "stacks" / "rank-1.txt"
    kept = own.with_name("rank-1.kept")
    outside = tmp_path / "outside.txt"  # on the job root's filesystem (both in the temp dir)
    outside.write_bytes(b"x" * (2 * MB))
    own.rename(kept)
    try:
        own.symlink_to(outside) if link == "symlink" else os.link(outside, own)
        with pytest.raises(HTTPClientError) as info:
            await stack(jp_fetch, busy_job.id, "rank-1", method="faulthandler")
        assert info.value.code == 502
        assert "stacks/rank-1.txt" in json.loads(info.value.response.body)["message"]
        assert outside.read_bytes() == b"x" * (2 * MB)
    finally:
        own.unlink(missing_ok=True)
        kept.rename(own)
        outside.unlink()
    assert "stuck_here" in (await stack(jp_fetch, busy_job.id, "rank-1", method="faulthandler"))["text"]


async def test_diagnose_over_rest_keeps_an_incident_the_details_list(jp_fetch: Any, busy_job: Job) -> None:
    """A job whose ranks never used torch.distributed: its stacks are said, no rank is blamed
    (the collective diagnosis itself: tests/test_diagnosis.py)."""
    response = await jp_fetch("disttrain", "api", "jobs", busy_job.id, "diagnose", method="POST", body="")
    assert response.code == 201
    incident = json.loads(response.body)
    assert incident["trigger"] == "manual" and incident["analyzer"] == "none"
    assert incident["verdict"].startswith("no collective record: the ranks have not used torch.distributed; ")
    assert "rank-1 is at train.py, line " in incident["verdict"]
    rank1 = next(r for r in incident["ranks"] if r["replica"] == "rank-1")
    assert "stuck_here" in rank1["stack"] and rank1["state"] == "running"
    kept = await get_json(jp_fetch, "jobs", busy_job.id, "incidents", incident["name"])
    assert kept == incident
    detail = await get_json(jp_fetch, "jobs", busy_job.id)
    assert incident["name"] in [i["name"] for i in detail["incidents"]]
    hours = detail["hours"]
    assert hours["unit"] == "core" and hours["allocated"] > 0 and 0 < hours["used"] <= hours["allocated"]
    for name, code in (("20260101T000000.000Z-manual", 400), ("..", 400)):
        with pytest.raises(HTTPClientError) as info:
            await get_json(jp_fetch, "jobs", busy_job.id, "incidents", name)
        assert info.value.code == code and "incident" in json.loads(info.value.response.body)["message"]


async def test_diagnose_of_an_ended_job_is_409(jp_fetch: Any, finished_job: str) -> None:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("disttrain", "api", "jobs", finished_job, "diagnose", method="POST", body="")
    assert info.value.code == 409
    assert "Succeeded" in json.loads(info.value.response.body)["message"]
