"""DCP's ``load(state)`` without a ``checkpoint_id`` gets ``DISTTRAIN_RESUME_FROM`` in a script run
by the rank wrapper (the patch waits for the script's import), and in a process that imported
``torch.distributed.checkpoint`` before (a warm rank forked from a zygote that had it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parents[1])

pytest.importorskip("torch")

LOAD = """
import torch
import torch.distributed.checkpoint as dcp
state = {"w": torch.zeros(4)}
dcp.load(state, no_dist=True)
print(state["w"].tolist())
"""


SAVE = """
import sys, torch, torch.distributed.checkpoint as dcp
dcp.save({"w": torch.arange(4.0)}, checkpoint_id=sys.argv[1], no_dist=True)
"""
# A process that imported DCP before the patch was installed (a warm rank's zygote had it).
ALREADY = """
import torch.distributed.checkpoint
from jupyter_disttrain.runtime import libresume
libresume.install()
"""


def python(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DISTTRAIN_")}
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**base, "PYTHONPATH": HERE, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def loaded(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_dcp_load_without_a_checkpoint_id_reads_the_resume_dir(tmp_path: Path) -> None:
    saved = tmp_path / "step_3"
    assert python(["-c", SAVE, str(saved)], tmp_path).returncode == 0
    assert (saved / ".metadata").is_file()
    script = tmp_path / "train.py"
    script.write_text(LOAD)
    wrapper = ["-m", "jupyter_disttrain.runtime.worker", str(script)]
    resume = {"DISTTRAIN_RESUME_FROM": str(saved)}
    assert loaded(python(wrapper, tmp_path, **resume)) == "[0.0, 1.0, 2.0, 3.0]"
    assert (
        loaded(python(["-c", ALREADY + textwrap.dedent(LOAD)], tmp_path, **resume)) == "[0.0, 1.0, 2.0, 3.0]"
    )
    # Without a resume the script's own call is untouched (DCP then wants a checkpoint_id).
    done = python(wrapper, tmp_path)
    assert done.returncode != 0 and "checkpoint_id" in done.stderr
