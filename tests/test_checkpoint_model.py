"""The checkpoint model (``runtime/checkpoints.py``) is the one answer to "which checkpoint is the
newest complete one": a restarted rank (``restarts.py``), ``--resume JOB`` (``latest``), the
listing and ``--keep-checkpoints`` (``retention.py``) all take it, with the declarations read once
and bounded once, however long the file they are in."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from jupyter_disttrain.jobs.manager import JobManager
from jupyter_disttrain.model.specs import JobSpec
from jupyter_disttrain.runtime import checkpoints, contract, restarts, retention
from jupyter_disttrain.storage.store import JobRecord, JobStore

T0 = time.time() - 3600
PICKLE = b"\x80\x02}q\x00."  # a legacy torch.save head: a whole checkpoint once settled


def saved(path: Path, at: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(PICKLE)
    os.utime(path, (at, at))
    return path


def test_restart_resume_the_listing_and_retention_agree_on_a_5_mib_declarations_file(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs")
    store.create(JobRecord(id="big-a1", spec=JobSpec(name="big")), "print(1)\n")
    job_dir = store.job_dir("big-a1")
    ckpts = job_dir / contract.CHECKPOINTS_DIR
    for step in (10, 20, 30):
        saved(ckpts / f"step_{step}.pt", T0 + step)
    # Its name says no step and it is older than step_30.pt: only its declaration, the last line
    # of a 5 MiB file, makes it the newest.
    final = saved(ckpts / "model-final.pt", T0 + 5)
    run = job_dir / contract.RUNS_DIR / "r1"
    run.mkdir(parents=True)
    (run / contract.RUN_FILE).write_text(json.dumps({"name": "r1"}))
    gone = tmp_path / "elsewhere"  # declared, then deleted: nothing to scan there
    lines, size, i = [], 0, 0
    while size <= 5 << 20:
        lines.append(json.dumps({"path": str(gone / f"step_{i}.pt"), "step": i}))
        size, i = size + len(lines[-1]) + 1, i + 1
    lines.append(json.dumps({"path": str(final), "step": 1000}))
    (run / contract.CHECKPOINTS_FILE).write_text("\n".join(lines) + "\n")
    assert (
        run / contract.CHECKPOINTS_FILE
    ).stat().st_size > 5 << 20  # past 4 MiB: a restart read up to there

    newest = checkpoints.checkpoint_id(str(job_dir), str(final))
    # the restarted rank
    restarted = restarts.newest(str(job_dir), str(ckpts))
    assert restarted is not None and restarted.path == str(final) and restarted.step == 1000
    # --resume JOB and the listing
    manager = JobManager(store, "local")
    resumed = manager.job_checkpoints.resolve(JobSpec(name="again", resume="big-a1")).resumed_from
    assert resumed is not None and (resumed.path, resumed.checkpoint, resumed.step) == (
        str(final),
        newest,
        1000,
    )
    listing = manager.checkpoints("big-a1")
    assert listing.usage.latest == newest
    assert [c.path for c in listing.checkpoints if c.complete][-1] == str(final)
    # --keep-checkpoints 1, declarations read as its thread reads them
    doomed = retention.prune(
        str(ckpts), 1, set(), settle=0.0, declared=checkpoints.declarations(str(job_dir))
    )
    assert sorted(doomed) == sorted(str(ckpts / f"step_{step}.pt") for step in (10, 20, 30))
    assert [p.name for p in ckpts.iterdir()] == ["model-final.pt"]


def test_one_bound_for_the_declarations_the_newest_lines_of_the_last_mib(tmp_path: Path) -> None:
    run = tmp_path / contract.RUNS_DIR / "r1"
    run.mkdir(parents=True)
    lines = [
        json.dumps({"path": f"/data/ckpt_{i}.pt", "step": i}) for i in range(3 * checkpoints.MAX_DECLARED)
    ]
    lines += ['{"path": "relative.pt", "step": 1}', '{"path": "/data/torn', ""]
    (run / contract.CHECKPOINTS_FILE).write_text("\n".join(lines))
    found = checkpoints.declared(str(tmp_path), "r1")
    assert len(found) == checkpoints.MAX_DECLARED - 2  # the newest lines; a relative and a torn one skipped
    last = 3 * checkpoints.MAX_DECLARED - 1
    assert found[f"/data/ckpt_{last}.pt"] == checkpoints.Declared("r1", last)
    assert "/data/ckpt_0.pt" not in found
    assert checkpoints.declarations(str(tmp_path)) == found
    (tmp_path / contract.RUNS_DIR / "link").symlink_to(run)  # a link to a run is no run
    assert checkpoints.run_names(str(tmp_path)) == ["r1"]
