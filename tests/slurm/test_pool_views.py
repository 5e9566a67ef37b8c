"""The debugging views of a job forked from a Slurm warm step (issue 36: "identical in every view
to a cold job"), on the test cluster: its stacks (this job's ranks, read on their node through
``srun --overlap``), which rank is stuck, and a rank's ``breakpoint()`` answered from here."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.prompt_helpers import PROMPT_SCRIPT, follow_answering
from tests.test_diagnosis import LATE_SCRIPT, LATE_VERDICT, wait_for_output

from .cluster import SlurmCluster
from .conftest import submit, wait_phase
from .test_warm_steps import allocation  # noqa: F401 (the fixture: a kernel inside salloc)

pytestmark = pytest.mark.slurm


def started(job) -> str:  # type: ignore[no-untyped-def]
    (line,) = [e.message for e in job.status().events if e.reason == "Started"]
    return str(line)


def test_a_jobs_stacks_verdict_and_debugger_in_a_warm_step(
    tmp_path: Path,
    store: JobStore,
    slurm_cluster: SlurmCluster,
    allocation: str,  # noqa: F811
) -> None:
    words = {"gpus": 2, "working_dir": str(tmp_path), "options": {"keep_warm": "30s"}}
    late = submit(store, LATE_SCRIPT, name="late", **words)
    try:
        wait_for_output(late, "rank-0", "step 3")
        assert "(warm: forked from the warm step" in started(late), started(late)
        time.sleep(0.5)  # rank 0 enters all_reduce #5
        text = late.stack("rank-1").text
        assert re.search(r"late \(.*train.py:6\)", text), text
        assert late.diagnose().verdict == LATE_VERDICT
    finally:
        late.cancel()
    wait_phase(late, {JobPhase.CANCELLED})

    job = submit(store, PROMPT_SCRIPT, name="prompt", **words)
    status, said = follow_answering(job, (None, "p x", "c"))
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert "(warm: forked from the warm step on each node" in started(job), started(job)
    assert said[0].open and said[1].output == "41\n(Pdb) " and not said[2].open
