"""Where a run lives and who records it: read from the environment the job gives each rank.

Inside a job, ``$DISTTRAIN_JOB_DIR/runs/<run>/`` and TensorBoard under ``$DISTTRAIN_TENSORBOARD_DIR``;
outside one (plain Python, a notebook cell), ``./.disttrain/runs/<run>/`` and ``./.disttrain/tensorboard``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime import contract

LOCAL_ROOT = contract.LOCAL_DIR


@dataclass(frozen=True)
class Place:
    runs: Path  # the directory of every run of this job
    tensorboard: Path
    job_id: str | None
    rank: int
    world_size: int


def here() -> Place:
    job_dir = os.environ.get(contract.JOB_DIR_ENV)
    root = Path(job_dir) if job_dir else Path.cwd() / LOCAL_ROOT
    tensorboard = os.environ.get(contract.TENSORBOARD_DIR_ENV) or str(root / contract.TENSORBOARD_DIR)
    return Place(
        runs=root / contract.RUNS_DIR,
        tensorboard=Path(tensorboard),
        job_id=os.environ.get(contract.JOB_ID_ENV),
        rank=_int_env("RANK", 0),
        world_size=_int_env("WORLD_SIZE", 1),
    )


def job_hparams() -> dict[str, Any]:
    """The job's hyper-parameters captured at submit (``$DISTTRAIN_HPARAMS``), or none."""
    text = os.environ.get(contract.HPARAMS_ENV)
    if not text:
        return {}
    try:
        values = json.loads(text)
    except ValueError:
        return {}
    return values if isinstance(values, dict) else {}


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def platform_info(place: Place, recording_ranks: int) -> dict[str, Any]:
    """What the run ran on. torch's version comes from its installed metadata and the GPU count
    from a torch the script already imported, else from the NVIDIA device files: importing torch
    here would cost seconds in a script that does not use it."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "host": platform.node(),
        "job_id": place.job_id,
        "world_size": place.world_size,
        "recording_ranks": recording_ranks,
        "torch": _torch_version(),
        "gpus": _gpus(sys.modules.get("torch")),
    }
    return info


def _gpus(torch: Any) -> int:
    if torch is not None:
        try:
            return int(torch.cuda.device_count())
        except Exception:  # a broken CUDA setup must not stop the run's record
            return 0
    return len([n for n in os.listdir("/dev") if n.removeprefix("nvidia").isdigit()])


def _torch_version() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
