"""``jupyter disttrain checkpoints ID`` and ``run --resume`` / ``--keep-checkpoints`` from a
terminal, as their own processes, over a real job that saved torch.save checkpoints."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.storage.store import JobStore

SAVER = """
import os, torch
ckpts = os.environ["DISTTRAIN_CHECKPOINT_DIR"]
print("resume from", os.environ.get("DISTTRAIN_RESUME_FROM", "nothing"), flush=True)
if os.environ["RANK"] == "0":
    os.makedirs(ckpts, exist_ok=True)
    for step in (3, 6):
        torch.save({"w": torch.ones(4) * step}, os.path.join(ckpts, f"ckpt_{step}.pt"))
"""


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.cli", "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("cli") / "jobs"
    job = api.submit(SAVER, store=JobStore(root), name="saver", gpus=2, accelerator="cpu")
    assert job.wait(timeout=300).phase.value == "Succeeded"
    for path in (job.dir / "checkpoints").iterdir():  # settled: not still growing
        os.utime(path, (time.time() - 60, time.time() - 60))
    return root, job.id


def test_checkpoints_table(saved: tuple[Path, str]) -> None:
    root, job_id = saved
    lines = _cli(root, "checkpoints", job_id).stdout.splitlines()
    assert lines[0].split() == ["STEP", "KIND", "TIME", "SIZE", "COMPLETE", "PATH"]
    rows = [line.split() for line in lines[1:3]]
    assert [(r[0], r[1], r[4]) for r in rows] == [("3", "torch", "yes"), ("6", "torch", "yes")]
    assert rows[1][5] == str(JobStore(root).job_dir(job_id) / "checkpoints" / "ckpt_6.pt")
    assert lines[3].startswith("2 checkpoint(s), 2 complete")


def test_run_resume_gives_the_ranks_the_checkpoint(saved: tuple[Path, str], tmp_path: Path) -> None:
    root, job_id = saved
    script = tmp_path / "again.py"
    script.write_text(SAVER)
    run = _cli(root, "run", str(script), "--gpus", "2", "--resume", f"{job_id}:3")
    expected = JobStore(root).job_dir(job_id) / "checkpoints" / "ckpt_3.pt"
    assert f"[rank1] resume from {expected}" in run.stdout, run.stdout + run.stderr
    assert "Succeeded" in run.stdout


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--resume", "{job}:4"], "has no checkpoint at step 4: its steps are 3, 6 (or resume from latest)"),
        (["--resume", "nosuch-abcde"], "there is no job nosuch-abcde"),
        (["--resume", "Bad Id"], "write JOB_ID, JOB_ID:STEP or JOB_ID:latest"),
        (["--keep-checkpoints", "-1"], "--keep-checkpoints takes a whole number of 0 (keep all) or more"),
    ],
)
def test_bad_flags_are_one_line_and_launch_nothing(
    saved: tuple[Path, str], tmp_path: Path, flags: list[str], says: str
) -> None:
    root, job_id = saved
    script = tmp_path / "again.py"
    script.write_text(SAVER)
    before = JobStore(root).ids()
    bad = _cli(root, "run", str(script), *[f.replace("{job}", job_id) for f in flags])
    assert bad.returncode != 0 and says in bad.stderr, bad.stderr
    assert JobStore(root).ids() == before
