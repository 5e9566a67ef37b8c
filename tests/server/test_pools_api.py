"""Warm pools on the test cluster (docs/warm-start.md "Warm on the cluster"): a warm job's keeper
is listed as a pool (its step, node, the job running in it, then idle for and releases in) by the
Python API, by another process (a restarted kernel finds it by its socket) and over REST; a
release of a pool running a job is refused naming the job; a keeper of an older fingerprint of the
same allocation (after a ``pip install``) is released once a new one serves; ``DELETE pools/ID``
of a pool running a job is a 409 unless forced, and then ends the pool's steps and keeper (the job
fails, naming the release); an unknown id is a 404 naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.slurm import pools
from jupyter_disttrain.backends.warm import plan
from jupyter_disttrain.model.errors import PoolBusyError
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage import procs
from jupyter_disttrain.storage.store import JobStore
from tests.slurm.cluster import SlurmCluster
from tests.slurm.conftest import wait_for, wait_phase
from tests.slurm.test_warm_steps import SCRIPT, WAIT, allocation, counts, steps  # noqa: F401 (a fixture)

from .test_api_input import answer

pytestmark = pytest.mark.slurm
KEEP = 90  # seconds a warm step stays idle: longer than the test, so only releases end them


def submit(store: JobStore, cwd: Path, word: str, wait: str = "") -> api.Job:
    words: dict[str, Any] = {"backend": "slurm", "gpus": 2, "working_dir": str(cwd)}
    return api.submit(
        SCRIPT.format(word=word, wait=wait), store=store, options={"keep_warm": f"{KEEP}s"}, **words
    )


@pytest.fixture
def new_fingerprint() -> Iterator[Any]:
    """A callable that changes the kernel's fingerprint as a ``pip install`` of this package does
    (a file of it modified); its time is put back after the test."""
    touched = Path(plan.__file__).parents[2] / "runtime" / "contract.py"
    before = touched.stat()
    yield lambda: os.utime(touched, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    os.utime(touched, ns=(before.st_atime_ns, before.st_mtime_ns))


async def test_pools_are_listed_and_released(
    jp_fetch: Any,
    job_root: Path,
    tmp_path: Path,
    slurm_cluster: SlurmCluster,
    allocation: str,  # noqa: F811 (the fixture)
    new_fingerprint: Any,
) -> None:
    code, listing = await answer(jp_fetch, "pools")
    assert code == 200 and listing == {"pools": [], "errors": []}, listing
    code, reply = await answer(jp_fetch, "pools", "slurm-1-0123456789abcdef0123", method="DELETE")
    assert code == 404 and "no warm pool 'slurm-1-0123456789abcdef0123'" in reply["message"], reply

    store = JobStore(job_root)
    (tmp_path / "counted.py").write_text("COUNT = 0\n")
    first = submit(store, tmp_path, "first", WAIT)
    wait_for(lambda: len(counts(first, "first")) == 2, 120, "the first run's ranks printed")
    (warm_step,) = steps(slurm_cluster, allocation)
    (pool,) = api.pools(store).pools
    assert pool.id.startswith(f"slurm-{allocation}-") and pool.place == f"allocation {allocation}"
    assert [(n.step, n.jobs) for n in pool.nodes] == [(warm_step.split()[0], [first.id])], pool
    assert pool.jobs == [first.id] and pool.idle_for is None and pool.releases_in is None

    # Another process (a restarted kernel, the terminal) finds the pool by its keeper's socket.
    cli = [sys.executable, "-m", "jupyter_disttrain.cli", "pools"]
    shown = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=True).stdout
    assert pool.id in shown and first.id in shown and f"allocation {allocation}" in shown, shown

    # Busy: refused, naming the job, and nothing ended.
    with pytest.raises(PoolBusyError, match=f"pool {pool.id} runs job {first.id}: cancel it first"):
        api.release_pool(pool.id, store=store)
    assert first.cancel().phase is JobPhase.CANCELLED
    wait_for(lambda: not procs.job_processes(first.id), 60, "the cancelled run's processes ended")
    (idle,) = wait_for(lambda: [p for p in api.pools(store).pools if not p.jobs], 30, "the pool idle")
    assert idle.idle_for is not None and 0 < idle.releases_in <= KEEP, idle  # type: ignore[operator]

    # After a pip install: a new keeper and warm step serve, and the old keeper is released.
    new_fingerprint()
    second = submit(store, tmp_path, "second")
    assert wait_phase(second, {JobPhase.SUCCEEDED, JobPhase.FAILED}, 240).phase is JobPhase.SUCCEEDED
    old_socket = plan.zygote_dir() / f"{pool.id}.sock"
    wait_for(lambda: not pools.alive(old_socket), 60, "the older fingerprint's keeper released")
    (new,) = api.pools(store).pools
    assert new.id != pool.id and new.nodes[0].step not in (warm_step.split()[0], "?"), new
    assert steps(slurm_cluster, allocation) == [f"{new.nodes[0].step} disttrain-warm"]

    # Released over REST while a job runs in it: refused unless forced; forced, the job fails
    # naming the release, its step and keeper end, and no pool is left.
    third = submit(store, tmp_path, "third", WAIT)
    wait_for(lambda: len(counts(third, "third")) == 2, 120, "the third run's ranks printed")
    code, reply = await answer(jp_fetch, "pools", new.id, method="DELETE")
    assert code == 409 and f"runs job {third.id}" in reply["message"], reply
    code, reply = await answer(jp_fetch, "pools", new.id, method="DELETE", params={"force": "true"})
    assert code == 200 and reply["released"] is True and new.nodes[0].step in reply["message"], reply
    assert not steps(slurm_cluster, allocation)
    assert wait_phase(third, {JobPhase.SUCCEEDED, JobPhase.FAILED}, 60).phase is JobPhase.FAILED
    (said,) = [e.message for e in third.status().events if e.reason == "WarmStepLost"]
    assert said.startswith(f"the warm step {new.nodes[0].step} on ") and "released by force" in said, said
    # ... which is why it failed, in the sidebar's row and its details (not its stopped agent's words)
    assert (third.status().reason, third.status().message) == ("WarmStepLost", said)
    code, listing = await answer(jp_fetch, "pools")
    assert code == 200 and listing == {"pools": [], "errors": []}, listing
