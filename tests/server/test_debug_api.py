"""``POST jobs/<id>/debug/<replica>`` (what the widget's debugger input sends through the lab)
over a real local job stopped in ``breakpoint()``, its bad input, and the values ``--out`` kept
in the job's details."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_disttrain.api import submit
from jupyter_disttrain.storage.store import JobStore

from .conftest import poll

SCRIPT = """\
import torch.distributed as dist
dist.init_process_group("gloo")
x = 40 + dist.get_rank()
losses = [0.5, 0.25]
if dist.get_rank() == 1:
    breakpoint()
dist.barrier()
"""


async def post(jp_fetch: Any, job_id: str, replica: str, body: Any) -> Any:
    response = await jp_fetch(
        "disttrain", "api", "jobs", job_id, "debug", replica, method="POST", body=json.dumps(body)
    )
    return json.loads(response.body)


async def refused(jp_fetch: Any, job_id: str, replica: str, body: Any) -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as err:
        await post(jp_fetch, job_id, replica, body)
    assert err.value.response is not None
    return err.value.code, json.loads(err.value.response.body)["message"]


async def test_a_ranks_prompt_is_answered_over_rest_and_the_details_list_the_values(
    jp_fetch: Any, job_root: Path
) -> None:
    job = submit(SCRIPT, store=JobStore(job_root), name="rest", gpus=2, accelerator="cpu", out=["losses"])
    try:

        async def stopped() -> Any:
            return any("waits in the debugger" in line.text for line in job.logs("rank-1"))

        await poll(stopped, "rank-1 at its prompt", deadline=120)
        assert (await refused(jp_fetch, job.id, "rank-1", {"line": 3}))[0] == 400
        assert (await refused(jp_fetch, job.id, "rank-1", {"cmd": "p x"}))[0] == 400
        assert (await refused(jp_fetch, job.id, "rank-1", {"line": "p x\nc"}))[0] == 400
        assert (await refused(jp_fetch, job.id, "a..b", {}))[0] == 400  # no replica name
        code, message = await refused(jp_fetch, job.id, "rank-0", {})  # rank 0 waits in the barrier
        assert code == 409 and "no debugger prompt waits there" in message
        first = await post(jp_fetch, job.id, "rank-1", {})
        assert first["open"] and "-> dist.barrier()" in first["output"]
        assert await post(jp_fetch, job.id, "rank-1", {"line": "p x"}) == {
            "replica": "rank-1",
            "output": "41\n(Pdb) ",
            "open": True,
            "quit": False,
        }
        assert (await post(jp_fetch, job.id, "rank-1", {"line": "c"}))["open"] is False
        assert job.wait(timeout=120).phase.value == "Succeeded"
        response = await jp_fetch("disttrain", "api", "jobs", job.id)
        (kept,) = json.loads(response.body)["values"]
        assert kept["name"] == "losses" and kept["kind"] == "value" and kept["type"] == "list"
        assert kept["rank"] == 0 and kept["bytes"] > 0 and kept["refused"] is None
        code, message = await refused(jp_fetch, job.id, "rank-1", {})
        assert code == 409 and "a debugger prompt needs a running job" in message
    finally:
        job.cancel()
    assert (await refused(jp_fetch, "no-such-job", "rank-1", {}))[0] == 404
