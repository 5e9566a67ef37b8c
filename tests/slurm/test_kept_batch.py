"""A batch job kept warm (``--keep-warm`` outside an allocation), on the test cluster: the first job
starts a warm step in its batch job, which then stays; a re-run of the same shape runs in it with
no sbatch (forked, torch imported, its own changed script, a module's state fresh, a job of its
own); another shape says why and would be a new batch job; the kept job is a pool, refused while
busy, released by force (``scancel``: the job in it fails, nothing hangs) and the next re-run is a
new batch job again (docs/warm-start.md, "Slurm batch jobs: --keep-warm DURATION")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.slurm import launch
from jupyter_disttrain.backends.slurm.backend import SlurmBackend
from jupyter_disttrain.backends.slurm.client import SlurmClient
from jupyter_disttrain.backends.slurm.kept import KEPT_FILE, MARKS_DIR, POOL_PREFIX
from jupyter_disttrain.backends.slurm.request import SlurmRequest
from jupyter_disttrain.model.errors import PoolBusyError
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.payloads.pools import Pool
from jupyter_disttrain.storage.store import JobStore
from tests.prompt_helpers import PROMPT_SCRIPT, follow_answering

from .cluster import SlurmCluster
from .conftest import slurm_id, slurm_state, wait_for, wait_phase
from .test_warm_steps import WAIT, alive, counts, job_words, run, submit

pytestmark = pytest.mark.slurm

NEW_BATCH = "# start: warm: a warm step starts on each node of the new batch job"


def test_a_rerun_of_the_same_shape_runs_in_the_kept_batch_job_without_sbatch(
    tmp_path: Path, store: JobStore, slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "counted.py").write_text("COUNT = 0\n")
    submitted: list[list[str]] = []
    real_submit = SlurmClient.submit

    def counted_submit(self: SlurmClient, argv: list[str]) -> str:  # the real sbatch, counted
        submitted.append(argv)
        return real_submit(self, argv)

    monkeypatch.setattr(SlurmClient, "submit", counted_submit)
    dry = api.dryrun("print(1)", store=store, **job_words(tmp_path))
    assert NEW_BATCH in dry.text and "# submitted with:" in dry.text, dry.text

    first, lines = run(store, tmp_path, "first")
    kept = slurm_id(first)
    try:
        (started,) = [e.message for e in first.status().events if e.reason == "Started"]
        assert "warm: forked from the warm step started for it on each node" in started, started
        step_id = lines[0].rpartition(" step ")[2]
        assert sorted(lines) == [f"first count 1 rank {r} held True step {step_id}" for r in (0, 1)], lines
        kept_file = store.job_dir(first.id) / "slurm" / KEPT_FILE
        wait_for(kept_file.exists, 60, "the batch job recorded as kept")
        assert slurm_state(slurm_cluster, kept) == "RUNNING"

        dry = api.dryrun("print(1)", store=store, **job_words(tmp_path))
        assert f"# start: warm: in kept Slurm job {kept}, forked from its warm step" in dry.text, dry.text
        assert "# submitted with:" not in dry.text, dry.text
        other = api.dryrun("print(1)", store=store, **{**job_words(tmp_path), "gpus": 1})
        assert f"not in a kept job: kept Slurm job {kept} has nproc_per_node 2, this job 1" in other.text
        assert "# submitted with:" in other.text, other.text

        # A re-run (its script changed): no sbatch, the kept job's warm step forks it as a job of its own.
        second, lines = run(store, tmp_path, "second")
        assert len(submitted) == 1, submitted
        assert slurm_id(second) == kept
        assert sorted(lines) == [f"second count 1 rank {r} held True step {step_id}" for r in (0, 1)], lines
        events = {e.reason: e.message for e in second.status().events}
        assert events["SlurmJob"].startswith(f"runs in kept Slurm job {kept} on "), events
        assert "warm: forked from the warm step on each node (no new step)" in events["Started"], events
        assert first.status().phase is JobPhase.SUCCEEDED

        # The kept job is a pool (listed once); busy, a release is refused; a cancelled job in it
        # leaves it kept; idle for KEEP, it ends by itself, and the next re-run is a new batch job.
        backend = SlurmBackend(store)

        def pool_of_kept() -> Pool:
            (pool,) = [p for p in backend.pools() if kept in p.place]
            return pool

        assert pool_of_kept().id == f"{POOL_PREFIX}{kept}"
        # The job's launcher step ends just after the job's status says so.
        wait_for(lambda: pool_of_kept().jobs == [], 30, "the second job's launcher step ended")
        # Its keeper runs on this machine (the test cluster's nodes): its warm step as it says.
        (node,) = pool_of_kept().nodes
        assert node.step == f"{kept}.{step_id}", node
        assert pool_of_kept().idle_for is not None
        third = submit(store, tmp_path, "third", WAIT)
        wait_for(lambda: len(counts(third, "third")) == 2, 120, "the third run's ranks printed")
        pool = pool_of_kept()
        assert pool.jobs == [third.id], pool
        # Its stacks are its own ranks', read on their node (issue 36: a job in a pool is seen as
        # a cold one), as is a prompt below (its ranks' breakpoint() answered from here).
        stack = third.stack("rank-1").text
        assert re.search(r"<module> \(.*train\.py:\d+\)", stack), stack
        with pytest.raises(PoolBusyError, match=f"runs job {third.id}: cancel it first"):
            backend.release(pool)
        assert third.cancel().phase is JobPhase.CANCELLED
        assert slurm_state(slurm_cluster, kept) == "RUNNING"
        prompt = api.submit(PROMPT_SCRIPT, store=store, **job_words(tmp_path))  # type: ignore[arg-type]
        status, said = follow_answering(prompt, (None, "p x", "c"))
        assert status.phase is JobPhase.SUCCEEDED and slurm_id(prompt) == kept, status.message
        assert said[0].open and said[1].output == "41\n(Pdb) " and not said[2].open
        wait_for(lambda: slurm_state(slurm_cluster, kept) != "RUNNING", 90, "the kept job ended when idle")
        wait_for(lambda: not alive("keeper", f"slurm-{kept}-"), 30, "the kept job's keeper ended")
        assert not kept_file.exists() and first.status().phase is JobPhase.SUCCEEDED
        dry = api.dryrun("print(1)", store=store, **job_words(tmp_path))
        assert NEW_BATCH in dry.text and "# submitted with:" in dry.text, dry.text

        # A new kept job; released by force while a job runs in it (scancel): that job stops,
        # nothing hangs, and no pool is left.
        fourth, _ = run(store, tmp_path, "fourth")
        kept = slurm_id(fourth)
        assert len(submitted) == 2
        wait_for((store.job_dir(fourth.id) / "slurm" / KEPT_FILE).exists, 60, "the batch job kept")
        fifth = submit(store, tmp_path, "fifth", WAIT)
        wait_for(lambda: len(counts(fifth, "fifth")) == 2, 120, "the fifth run's ranks printed")
        assert slurm_id(fifth) == kept and len(submitted) == 2
        assert backend.release(pool_of_kept(), force=True).released
        ended = wait_phase(fifth, {JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED}, 90)
        assert ended.phase is not JobPhase.SUCCEEDED, ended
        wait_for(lambda: not alive("keeper", f"slurm-{kept}-"), 30, "the kept job's keeper ended")
        assert not [p for p in backend.pools() if kept in p.place]
        # No batch job may be kept now: listings stop asking squeue.
        assert not list((store.root / MARKS_DIR).iterdir())
    finally:
        slurm_cluster.run("scancel", kept, check=False)


def test_a_kept_batch_job_requeued_after_its_job_ended_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm requeuing a kept batch job (preemption while it waits) reruns its batch script: the
    job, which had ended, is not run again (``kept.json`` says so), and its records stay."""
    job_dir = tmp_path / "job"
    (job_dir / "slurm").mkdir(parents=True)
    request = SlurmRequest(cwd=str(tmp_path), keep={"shape": {}, "idle": 60.0})
    (job_dir / "job.json").write_text(json.dumps({"request": request.to_json()}))
    (job_dir / "slurm" / KEPT_FILE).write_text(json.dumps({"slurm_job": "7", "shape": {}}))
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert launch.main([str(job_dir)]) == 0
    assert sorted(p.name for p in job_dir.rglob("*")) == ["job.json", "slurm"]
