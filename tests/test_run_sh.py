"""``run.sh`` next to ``train.py`` runs the job's script by hand as the job ran it (real torchrun)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

SCRIPT = """
import sys
import torch.distributed as dist
import datautils  # a module next to the notebook, not next to train.py

dist.init_process_group("gloo")
print(f"value={datautils.VALUE} rank={dist.get_rank()} world={dist.get_world_size()} args={sys.argv[1:]}")
dist.destroy_process_group()
"""


def _by_hand(argv: list[str], cwd: Path | str) -> subprocess.CompletedProcess[str]:
    """Run as a person would: from elsewhere, with none of the kernel's PYTHONPATH or job env."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("DISTTRAIN_")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _ranks(text: str) -> list[str]:
    # Two ranks share the terminal unbuffered: a line's text and its newline may interleave.
    return sorted(re.findall(r"value=\S+ rank=\d+ world=\d+ args=\[[^\]]*\]", text))


def test_bash_run_sh_reproduces_a_job_that_imports_a_local_module(store: JobStore, tmp_path: Path) -> None:
    project = tmp_path / "my project"  # a space: every path in run.sh is quoted
    project.mkdir()
    (project / "datautils.py").write_text("VALUE = 42\n")
    job = api.submit(SCRIPT, store=store, gpus=2, working_dir=str(project), args=["--title", "a b"])
    status = job.wait(timeout=120)
    assert status.phase is JobPhase.SUCCEEDED, status
    in_job = _ranks("\n".join(ln.text for ln in job.logs() if ln.rank is not None))
    assert in_job == [f"value=42 rank={r} world=2 args=['--title', 'a b']" for r in (0, 1)]

    run = _by_hand(["bash", str(job.dir / "run.sh")], "/")
    assert run.returncode == 0, run.stderr[-2000:]
    assert _ranks(run.stdout) == in_job
    # Arguments given to run.sh replace the job's; the job's own processes are not touched.
    run = _by_hand(["bash", str(job.dir / "run.sh"), "--other"], "/")
    assert run.returncode == 0, run.stderr[-2000:]
    assert _ranks(run.stdout) == [f"value=42 rank={r} world=2 args=['--other']" for r in (0, 1)]
    # Plain torchrun next to train.py cannot import the module: what run.sh is for.
    plain = _by_hand(["torchrun", "--standalone", "--nproc-per-node=1", "train.py"], job.dir)
    assert "No module named 'datautils'" in plain.stdout + plain.stderr


def test_the_dry_run_shows_run_sh(store: JobStore, tmp_path: Path) -> None:
    info = api.dryrun("print(1)", store=store, gpus=1, nodes=2, working_dir=str(tmp_path), env={"MSG": "a b"})
    assert "# ---- run.sh" in info.text and f"cd {tmp_path}" in info.text
    assert "export MSG='a b'" in info.text and '--rdzv-endpoint=127.0.0.1:"$port"' in info.text
    assert '--log-dir="$here"/torchelastic' in info.text  # torchrun's error files beside run.sh
    assert "DISTTRAIN_JOB_ID" not in info.text.split("# ---- run.sh")[1]


def test_an_entrypoint_named_run_sh_is_refused(store: JobStore) -> None:
    with pytest.raises(InvalidSpecError, match="must be a plain Python file name"):
        api.submit("print(1)", store=store, entrypoint="run.sh")
    assert store.ids(include_deleted=True) == []
