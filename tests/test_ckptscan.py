"""runtime/ckptscan.py on real files: torch.save, DCP's save, and the layouts Lightning and
DeepSpeed write (their files are torch.save zips: made here with torch.save in their layout)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from jupyter_disttrain.runtime import ckptscan, contract

torch = pytest.importorskip("torch")

OLD = time.time() - 60  # settled: no longer growing
T = TypeVar("T")


def settle(*paths: Path) -> None:
    for path in paths:
        for sub in [path, *path.rglob("*")] if path.is_dir() else [path]:
            os.utime(sub, (OLD, OLD))


def save(path: Path, obj: object | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj if obj is not None else {"w": torch.arange(4.0)}, path)
    return path


def deepspeed_tag(save_dir: Path, tag: str, shards: int) -> Path:
    """DeepSpeed's save_checkpoint layout (engine._get_ckpt_name, _get_zero_ckpt_name)."""
    save(save_dir / tag / "mp_rank_00_model_states.pt", {"module": {"w": torch.ones(2)}})
    for dp in range(shards):
        save(save_dir / tag / f"zero_pp_rank_{dp}_mp_rank_00_optim_states.pt", {"s": torch.ones(1)})
    return save_dir / tag


def test_torch_files_steps_from_names_oldest_first(tmp_path: Path) -> None:
    for name in ("step_300.pt", "ckpt-100.pt", "step=200.pth", "model.pt"):
        save(tmp_path / name)
    save(tmp_path / "sub" / "step_50" / "weights.pt")
    save(tmp_path / "run_3" / "weights.pt")  # a directory's bare number is no step
    (tmp_path / "notes.bin").write_bytes(b"not a checkpoint")
    settle(tmp_path)
    found = ckptscan.scan(str(tmp_path))
    names = [os.path.relpath(f.path, tmp_path) for f in found]
    # A directory holding a checkpoint's file is that checkpoint (step_50/, run_3/).
    assert {n for n, f in zip(names, found, strict=True) if f.step is None} == {"model.pt", "run_3"}
    assert names[-4:] == [os.path.join("sub", "step_50"), "ckpt-100.pt", "step=200.pth", "step_300.pt"]
    assert [f.kind for f in found] == [
        "files" if f.path.endswith(("run_3", "step_50")) else "torch" for f in found
    ]
    assert all(f.complete and os.path.isabs(f.path) for f in found)
    assert found[-1].size == (tmp_path / "step_300.pt").stat().st_size
    assert found[-1].step_source == "name"
    assert ckptscan.newest_complete(str(tmp_path)) == found[-1]


def test_a_zip_without_its_end_record_or_still_growing_is_not_complete(tmp_path: Path) -> None:
    whole = save(tmp_path / "step_1.pt")
    data = whole.read_bytes()
    (tmp_path / "step_2.pt").write_bytes(data[: len(data) // 2])  # cut mid-write
    fresh = save(tmp_path / "step_3.pt")
    settle(whole, tmp_path / "step_2.pt")
    by_step = {f.step: f for f in ckptscan.scan(str(tmp_path))}
    assert by_step[1].complete
    assert not by_step[2].complete
    assert not by_step[3].complete  # written just now: may still be growing
    assert ckptscan.newest_complete(str(tmp_path)) == by_step[1]
    settle(fresh)
    assert ckptscan.newest_complete(str(tmp_path)).path == str(fresh)  # type: ignore[union-attr]


def test_legacy_torch_save_format(tmp_path: Path) -> None:
    path = tmp_path / "iter_7.pt"
    torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=False)
    settle(path)
    (found,) = ckptscan.scan(str(tmp_path))
    assert (found.kind, found.step, found.complete) == ("torch", 7, True)


def test_lightning_ckpt_epoch_and_step(tmp_path: Path) -> None:
    state = {"epoch": 3, "global_step": 1200, "state_dict": {"layer.weight": torch.ones(2)}}
    save(tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "epoch=3-step=1200.ckpt", state)
    save(tmp_path / "last.ckpt", state)
    settle(tmp_path)
    os.symlink(tmp_path / "last.ckpt", tmp_path / "link.ckpt")  # a link is not listed twice
    found = ckptscan.scan(str(tmp_path))
    assert [(f.kind, f.step, f.epoch) for f in found] == [
        ("lightning", None, None),
        ("lightning", 1200, 3),
    ]
    assert all(f.complete for f in found)


def test_deepspeed_tags_complete_up_to_latest(tmp_path: Path) -> None:
    save_dir = tmp_path / "ds"
    deepspeed_tag(save_dir, "global_step10", shards=2)
    deepspeed_tag(save_dir, "global_step20", shards=2)
    (save_dir / "latest").write_text("global_step10")
    deepspeed_tag(save_dir, "global_step30", shards=2)  # newer than latest: being written
    settle(tmp_path)
    found = ckptscan.scan(str(tmp_path))
    assert [(f.kind, f.step, f.step_source, f.world_size) for f in found] == [
        ("deepspeed", 10, "metadata", 2),
        ("deepspeed", 20, "metadata", 2),
        ("deepspeed", 30, "metadata", 2),
    ]
    assert [f.complete for f in found] == [True, False, False]
    tag = save_dir / "global_step10"
    assert found[0].size == sum(p.stat().st_size for p in tag.iterdir())
    (save_dir / "latest").write_text("global_step30")
    settle(save_dir / "latest")
    assert [f.complete for f in ckptscan.scan(str(tmp_path))] == [True, True, True]


def test_deepspeed_without_latest_and_lightnings_deepspeed_dir(tmp_path: Path) -> None:
    deepspeed_tag(tmp_path / "first", "global_step5", shards=1)  # latest not written yet
    # Lightning's DeepSpeedStrategy: "<name>.ckpt/" holding latest and the tag "checkpoint".
    saved = tmp_path / "epoch=0-step=9.ckpt"
    deepspeed_tag(saved, "checkpoint", shards=2)
    (saved / "latest").write_text("checkpoint")
    settle(tmp_path)
    found = ckptscan.scan(str(tmp_path))
    assert [(f.step, f.step_source, f.epoch, f.complete) for f in found] == [
        (5, "metadata", None, False),
        (9, "name", 0, True),
    ]


def test_dcp_directories(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    state = {"model": {"w": torch.arange(6.0)}}
    dcp.save(state, checkpoint_id=str(tmp_path / "step_4"))
    dcp.save(state, checkpoint_id=str(tmp_path / "step_8"))
    os.unlink(tmp_path / "step_8" / ".metadata")  # .metadata is written last
    settle(tmp_path)
    found = ckptscan.scan(str(tmp_path))
    assert [(f.kind, f.step, f.complete) for f in found] == [("dcp", 4, True), ("dcp", 8, False)]
    assert found[0].size == sum(p.stat().st_size for p in (tmp_path / "step_4").iterdir())
    assert found[0].mtime == pytest.approx(OLD)
    assert ckptscan.newest_complete(str(tmp_path)) == found[0]


def test_bounded_and_no_symlinks_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    save(outside / "step_1.pt")
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "escape")
    os.symlink(outside / "step_1.pt", root / "step_2.pt")
    for index in range(50):
        save(root / f"step_{index + 10}.pt")
    settle(tmp_path)
    assert all(f.path.startswith(str(root)) for f in ckptscan.scan(str(root)))
    assert len(ckptscan.scan(str(root))) == 50
    assert len(ckptscan.scan(str(root), limit=20)) <= 20
    assert ckptscan.scan(str(tmp_path / "missing")) == []
    assert ckptscan.newest_complete(str(tmp_path / "missing")) is None


def test_scan_path_one_declared_checkpoint(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    one = save(tmp_path / "elsewhere" / "model_500.pt")
    save(tmp_path / "elsewhere" / "model_600.pt")
    dcp.save({"w": torch.ones(3)}, checkpoint_id=str(tmp_path / "dcp_step_7"))
    tag = deepspeed_tag(tmp_path / "ds", "global_step3", shards=2)
    (tmp_path / "ds" / "latest").write_text("global_step3")
    settle(tmp_path)
    assert [(f.path, f.step) for f in ckptscan.scan_path(str(one))] == [(str(one), 500)]
    assert [(f.kind, f.step) for f in ckptscan.scan_path(str(tmp_path / "dcp_step_7"))] == [("dcp", 7)]
    assert [(f.kind, f.complete) for f in ckptscan.scan_path(str(tag))] == [("deepspeed", True)]
    assert [f.step for f in ckptscan.scan_path(str(tmp_path / "elsewhere"))] == [500, 600]
    assert ckptscan.scan_path(str(tmp_path / "nothing.pt")) == []


def test_a_file_read_before_is_read_again_once_it_changes(tmp_path: Path) -> None:
    path = save(tmp_path / "step_1.pt")
    settle(path)
    assert [f.complete for f in ckptscan.scan(str(tmp_path))] == [True]
    data = path.read_bytes()
    path.write_bytes(data[:-10])  # the same name, cut: a size of its own
    settle(path)
    assert [f.complete for f in ckptscan.scan(str(tmp_path))] == [False]
    path.write_bytes(data)
    settle(path)
    assert [f.complete for f in ckptscan.scan(str(tmp_path))] == [True]


def step_dirs(root: Path, steps: tuple[int, ...] = (100, 200, 300)) -> list[Path]:
    """A script that saves each step as a directory of files: step_N/{model,optim}.pt."""
    for step in steps:
        save(root / f"step_{step}" / "model.pt")
        save(root / f"step_{step}" / "optim.pt", {"m": torch.zeros(3)})
    return [root / f"step_{step}" for step in steps]


def hf_trainer_dirs(root: Path, steps: tuple[int, ...] = (100, 200, 300)) -> list[Path]:
    """HF Trainer's checkpoint-N/ layout (Trainer._save_checkpoint: the model's safetensors, its
    config, the optimizer, scheduler and RNG states, the trainer's state and arguments)."""
    from safetensors.torch import save_file

    out = []
    for step in steps:
        folder = root / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        save_file({"w": torch.ones(4)}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text('{"model_type": "bert"}')
        for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"):
            save(folder / name, {"state": torch.ones(2)})
        (folder / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
        out.append(folder)
    return out


@pytest.mark.parametrize("layout", [step_dirs, hf_trainer_dirs])
def test_a_directory_of_files_is_one_checkpoint(tmp_path: Path, layout: Callable[[Path], list[Path]]) -> None:
    folders = layout(tmp_path)
    settle(tmp_path)
    found = ckptscan.scan(str(tmp_path))
    steps = (100, 200, 300)
    assert [(f.path, f.kind, f.step, f.step_source, f.complete) for f in found] == [
        (str(folder), "files", step, "name", True) for folder, step in zip(folders, steps, strict=True)
    ]
    assert found[-1].size == sum(p.stat().st_size for p in folders[-1].iterdir())
    assert ckptscan.scan_path(str(folders[1])) == [found[1]]  # declared, it is the same one
    # Not complete while one of its files is still growing, or one is cut off.
    save(folders[-1] / "late.pt")
    assert [f.complete for f in ckptscan.scan(str(tmp_path))] == [True, True, False]
    settle(tmp_path)
    (folders[0] / "late.pt").write_bytes((folders[-1] / "late.pt").read_bytes()[:50])
    settle(tmp_path)
    assert [f.complete for f in ckptscan.scan(str(tmp_path))] == [False, True, True]


def test_files_that_name_steps_of_their_own_stay_apart(tmp_path: Path) -> None:
    save(tmp_path / "run_a" / "step_1.pt")
    save(tmp_path / "run_a" / "step_2.pt")
    save(tmp_path / "run_b" / "model_7.pt")
    save(tmp_path / "run_b" / "optim_7.pt")  # one step between them: one checkpoint
    save(tmp_path / "logs" / "version_0" / "checkpoints" / "epoch=0-step=5.ckpt")
    save(tmp_path / "logs" / "version_0" / "checkpoints" / "last.ckpt")  # Lightning's: each its own
    settle(tmp_path)
    rows = {(os.path.relpath(f.path, tmp_path), f.kind, f.step) for f in ckptscan.scan(str(tmp_path))}
    assert rows == {
        (os.path.join("run_a", "step_1.pt"), "torch", 1),
        (os.path.join("run_a", "step_2.pt"), "torch", 2),
        ("run_b", "files", None),
        (os.path.join("logs", "version_0", "checkpoints", "epoch=0-step=5.ckpt"), "lightning", 5),
        (os.path.join("logs", "version_0", "checkpoints", "last.ckpt"), "lightning", None),
    }


def test_a_fifo_is_never_waited_on(tmp_path: Path) -> None:
    """Another user's FIFO where a scan reads a file: DeepSpeed's latest (beside a tag, and in the
    parent of a declared directory), a pins file, a declarations file, a checkpoint's name."""
    from jupyter_disttrain.runtime import checkpoints, retention

    tag = deepspeed_tag(tmp_path / "ds", "global_step1", shards=1)
    declared = tmp_path / "shared" / "x"
    save(declared / "step_4.pt")
    run = tmp_path / "job" / contract.RUNS_DIR / "r"
    run.mkdir(parents=True)
    fifos = [
        tmp_path / "ds" / "latest",
        tmp_path / "shared" / "latest",
        tmp_path / "job" / contract.CHECKPOINT_PINS_FILE,
        run / contract.CHECKPOINTS_FILE,
        tmp_path / "ds" / "step_9.pt",
    ]
    for fifo in fifos:
        os.mkfifo(fifo)
    settle(tmp_path)
    found = returns(fifos, ckptscan.scan, str(tmp_path))
    assert [(f.kind, f.complete) for f in found] == [("deepspeed", False), ("torch", True)]  # latest unread
    assert [f.step for f in returns(fifos, ckptscan.scan_path, str(declared))] == [4]
    assert returns(fifos, ckptscan.scan_path, str(tag))[0].complete is False
    assert returns(fifos, retention.pinned, str(tmp_path / "job")) == set()
    assert returns(fifos, checkpoints.declared, str(tmp_path / "job"), "r") == {}


def returns(fifos: list[Path], fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)``'s answer; fails (after letting a blocked open of a FIFO go) if it waits."""
    answer: list[T] = []
    worker = threading.Thread(target=lambda: answer.append(fn(*args)), daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():
        for fifo in fifos:  # a writer's open releases a reader blocked in open()
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(10)
        pytest.fail(f"{fn.__name__} waited on a FIFO")
    return answer[0]
