"""An idle TensorBoard is stopped (a short idle timeout for this module's server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from .test_tensorboard import make_job, poll


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    jp_server_config["DistTrainApp"]["tensorboard_idle_timeout"] = 2.0
    return jp_server_config


async def test_idle_tensorboard_is_stopped(jp_fetch: Any, job_root: Path) -> None:
    job_id = make_job(job_root)
    started = json.loads(
        (await jp_fetch("disttrain", "api", "tensorboard", job_id, method="POST", body="")).body
    )
    assert started["running"]

    async def stopped() -> Any:
        info = json.loads((await jp_fetch("disttrain", "api", "tensorboard", job_id)).body)
        return not info["running"]

    await poll(stopped, "the idle TensorBoard to stop", deadline=30)
    assert (
        not psutil.pid_exists(started["pid"])
        or psutil.Process(started["pid"]).status() == psutil.STATUS_ZOMBIE
    )
