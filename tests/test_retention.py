"""``--keep-checkpoints N`` (runtime/retention.py): the newest N complete checkpoints stay, never
one being written or one a resume points at, a directory of files (step_N/, HF Trainer's
checkpoint-N/) kept or deleted whole; and a real 2-rank job writing 6 keeps 2."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.runtime import contract, restarts, retention
from jupyter_disttrain.storage.store import JobStore
from tests.test_ckptscan import hf_trainer_dirs, settle, step_dirs

torch = pytest.importorskip("torch")


def saved(path: Path, age: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"w": torch.ones(2)}, path)
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_prune_keeps_the_newest_complete_and_pinned(tmp_path: Path) -> None:
    old = [saved(tmp_path / f"step_{step}.pt", age=100 - step) for step in range(1, 7)]
    writing = saved(tmp_path / "step_7.pt", age=0)  # just written: may still grow
    pinned = {str(old[1])}
    deleted = retention.prune(str(tmp_path), keep=2, pins=pinned)
    assert sorted(deleted) == sorted(str(p) for p in (old[0], old[2], old[3]))
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["step_2.pt", "step_5.pt", "step_6.pt", "step_7.pt"]
    assert writing.exists()
    assert retention.prune(str(tmp_path), keep=0, pins=set()) == []  # 0: keep all


def test_pins_file(tmp_path: Path) -> None:
    assert retention.pinned(str(tmp_path)) == set()
    (tmp_path / contract.CHECKPOINT_PINS_FILE).write_text(json.dumps({"paths": ["/a", 3]}))
    assert retention.pinned(str(tmp_path)) == {"/a"}
    (tmp_path / contract.CHECKPOINT_PINS_FILE).write_text("{not json")
    assert retention.pinned(str(tmp_path)) == set()


SIX = """
import os, time, torch
import torch.distributed as dist
dist.init_process_group("gloo")
ckpts = os.environ["DISTTRAIN_CHECKPOINT_DIR"]
for step in range(1, 7):
    if dist.get_rank() == 0:
        os.makedirs(ckpts, exist_ok=True)
        torch.save({"w": torch.ones(8) * step}, os.path.join(ckpts, f"step_{step}.pt"))
    dist.barrier()
    time.sleep(0.2)
dist.destroy_process_group()
"""


def test_a_job_writing_six_keeps_two(store: JobStore, start_path: str) -> None:
    job = api.submit(SIX, store=store, name="six", gpus=2, accelerator="cpu", keep_checkpoints=2)
    assert job.wait(timeout=300).phase.value == "Succeeded", [ln.text for ln in job.logs()][-20:]
    assert sorted(p.name for p in (job.dir / "checkpoints").iterdir()) == ["step_5.pt", "step_6.pt"]
    assert job.checkpoints().usage.keep == 2


@pytest.mark.parametrize("keep", [1, 2])
@pytest.mark.parametrize("layout", [step_dirs, hf_trainer_dirs])
def test_a_directory_of_files_is_kept_deleted_and_resumed_whole(
    tmp_path: Path, layout: Callable[[Path], list[Path]], keep: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "checkpoints"
    folders = layout(root)
    settle(root)
    files = {folder: sorted(p.name for p in folder.iterdir()) for folder in folders}
    deleted = retention.prune(str(root), keep=keep, pins=set())
    assert sorted(deleted) == [str(folder) for folder in folders[:-keep]]
    assert sorted(root.iterdir()) == folders[-keep:]
    assert all(sorted(p.name for p in folder.iterdir()) == files[folder] for folder in folders[-keep:])
    # A restarted rank resumes from the newest directory, as a whole.
    monkeypatch.setenv(contract.CHECKPOINT_DIR_ENV, str(root))
    monkeypatch.setenv(contract.RESUME_FROM_ENV, "")  # the rank's own env: restored after the test
    assert restarts.resume_from_newest(None) == str(folders[-1])
    assert os.environ[contract.RESUME_FROM_ENV] == str(folders[-1])
