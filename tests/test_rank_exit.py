"""A rank that ends with its process group still up exits past the interpreter's teardown, and
still does what Python does at exit (real torchrun, 2 ranks, gloo)."""

from __future__ import annotations

from jupyter_disttrain import api
from jupyter_disttrain.specs import JobPhase
from jupyter_disttrain.store import JobStore

# No destroy_process_group: a non-daemon thread still running, an atexit function and a file
# left open must all finish as they would in a plain exit.
GROUP_LEFT_UP = """
import atexit, os, threading, time
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
left_open = open(os.path.join(os.environ["DISTTRAIN_JOB_DIR"], f"left-open-{rank}.txt"), "w")
left_open.write("written, never closed")  # buffered: only a finalizer writes it out
atexit.register(lambda: print(f"atexit ran on rank {rank}", flush=True))

def later():
    time.sleep(0.5)
    print(f"thread finished on rank {rank}", flush=True)

threading.Thread(target=later).start()
"""


def test_a_rank_that_leaves_its_group_up_exits_cleanly_after_its_threads_and_atexit(store: JobStore) -> None:
    job = api.submit(GROUP_LEFT_UP, store=store, gpus=2, accelerator="cpu")
    status = job.wait(timeout=120)
    texts = {(ln.rank, ln.text) for ln in job.logs()}
    assert status.phase is JobPhase.SUCCEEDED, (status.message, sorted(texts, key=str))
    for rank in (0, 1):
        assert (rank, f"thread finished on rank {rank}") in texts
        assert (rank, f"atexit ran on rank {rank}") in texts
        assert (job.dir / f"left-open-{rank}.txt").read_text() == "written, never closed"
    assert [r.exit_code for r in status.replicas] == [0, 0]


def test_sys_exit_with_a_message_still_prints_it_and_fails_the_rank(store: JobStore) -> None:
    script = (
        'import sys, torch.distributed as dist\ndist.init_process_group("gloo")\nsys.exit("stopping: bad")\n'
    )
    job = api.submit(script, store=store, gpus=2, accelerator="cpu")
    status = job.wait(timeout=120)
    assert status.phase is JobPhase.FAILED
    texts = [ln.text for ln in job.logs(replica="rank-0")]
    assert "stopping: bad" in texts
