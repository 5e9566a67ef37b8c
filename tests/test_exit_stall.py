"""A rank that never exits after a peer finished is named in the job's status (real torchrun,
gloo, 2 ranks), and the job can still be cancelled with nothing left running."""

from __future__ import annotations

import time

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage import procs
from jupyter_disttrain.storage.store import JobStore

# Every test on both paths of the local backend: warm (forked from the zygote) and cold.
pytestmark = pytest.mark.usefixtures("start_path")

# Rank 1 stays forever after rank 0 finished, as a rank stuck in a gloo teardown would.
HANGS_AFTER_RANK_0 = """
import time
import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    print("rank 1 stays", flush=True)
    time.sleep(600)
"""


# Rank 1's script ends well but leaves a thread that never ends: its process waits for it at exit.
THREAD_NEVER_ENDS = """
import threading
import time
import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    threading.Thread(target=time.sleep, args=(600,)).start()
print("script done", flush=True)
"""


def _wait_for_reason(job: api.Job, reason: str, deadline: float = 120.0) -> api.JobStatus:
    end = time.monotonic() + deadline
    while (status := job.status()).reason != reason:
        assert not status.is_terminal and time.monotonic() < end, status
        time.sleep(0.2)
    return status


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_rank_that_has_not_exited_after_its_peer_finished_is_named(store: JobStore, nodes: int) -> None:
    job = api.submit(
        HANGS_AFTER_RANK_0,
        store=store,
        gpus=2 // nodes,
        nodes=nodes,
        accelerator="cpu",
        options={"exit_timeout": 2, "grace_period": 1},
    )
    status = _wait_for_reason(job, "ExitStalled")
    assert status.phase is JobPhase.RUNNING
    assert status.message is not None
    assert status.message.startswith("rank-1 has not exited ")
    assert "s after rank-0 finished and printed nothing since; cancel the job to stop it" in status.message
    assert [e.reason for e in status.events].count("ExitStalled") == 1
    assert job.cancel().phase is JobPhase.CANCELLED
    assert procs.wait_gone(job.id, timeout=30)


def test_a_job_whose_scripts_all_ended_succeeds_when_a_rank_hangs_at_exit(store: JobStore) -> None:
    job = api.submit(
        THREAD_NEVER_ENDS,
        store=store,
        gpus=2,
        accelerator="cpu",
        options={"exit_timeout": 2, "grace_period": 1},
    )
    status = job.wait(timeout=120)
    assert status.phase is JobPhase.SUCCEEDED, status
    assert status.message == "all ranks finished (processes stuck at exit were stopped)"
    assert [r.phase for r in status.replicas] == [JobPhase.SUCCEEDED] * 2
    stalls = [e for e in status.events if e.reason == "ExitStalled"]
    assert len(stalls) == 1 and stalls[0].type == "Warning", status.events
    assert stalls[0].message.startswith("rank-1 finished its script but has not exited ")
    assert stalls[0].message.endswith("so it was stopped and the job succeeded")
    assert procs.wait_gone(job.id, timeout=30)


def test_exit_timeout_must_be_a_positive_number_of_seconds(store: JobStore) -> None:
    with pytest.raises(InvalidSpecError, match=r"^exit_timeout must be a number of seconds greater than 0"):
        api.submit("print(1)", store=store, options={"exit_timeout": 0})
    assert store.records() == []
