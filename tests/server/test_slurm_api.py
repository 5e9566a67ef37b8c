"""A Slurm job over REST: the server submits it, lists it and reads its logs; a bad Slurm
option, or a working dir with a control character, is a 400 naming the flag or the field, with
nothing submitted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.cluster import SlurmCluster

from .conftest import poll
from .test_api_input import answer, submit_body

pytestmark = pytest.mark.slurm


async def test_a_slurm_job_over_rest(jp_fetch: Any, job_root: Path, slurm_cluster: SlurmCluster) -> None:
    code, info = await answer(jp_fetch, "info")
    assert code == 200 and "slurm" in info["backends"]
    bad = submit_body({"backend": "slurm", "options": {"time": "soon"}})
    code, reply = await answer(jp_fetch, "jobs", method="POST", body=bad)
    assert code == 400 and reply["message"].startswith("--time 'soon' is not a Slurm time limit"), reply
    # A newline would inject lines into slurm/batch.sh; an abbreviated option is the option itself.
    for spec, message in (
        ({"backend": "slurm", "working_dir": "/tmp/exp\ntouch X #"}, "working_dir: the job's working dir"),
        ({"backend": "slurm", "options": {"sbatch_options": ["--outp=/tmp/x"]}}, "is sbatch's --output"),
    ):
        code, reply = await answer(jp_fetch, "jobs", method="POST", body=submit_body(spec))
        assert code == 400 and message in reply["message"] and "\n" not in reply["message"], reply
    assert not job_root.exists() or not any(job_root.glob("*/job.json"))

    body = json.dumps({"script": "print('hello over rest')\n", "spec": {"name": "rest", "backend": "slurm"}})
    code, reply = await answer(jp_fetch, "jobs", method="POST", body=body)
    assert code == 201 and reply["job"]["backend"] == "slurm", reply

    async def ended() -> Any:
        _, detail = await answer(jp_fetch, "jobs", reply["id"])
        return detail["status"]["phase"] if detail["summary"]["finish_time"] else None

    assert await poll(ended, "the Slurm job to end", deadline=120) == "Succeeded"
    _, chunk = await answer(jp_fetch, "jobs", reply["id"], "logs", params={"replica": "rank-0"})
    assert [x["text"] for x in chunk["lines"]] == ["hello over rest"]
