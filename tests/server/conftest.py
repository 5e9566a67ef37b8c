"""A real Jupyter server with the extension on, over a job store of the test's choosing."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.api import Job, submit
from jupyter_disttrain.storage.store import ROOT_ENV, JobStore

# Each rank prints LINES numbered lines; the tests check every one arrives once and in order.
LINES = 40
RANK_SCRIPT = textwrap.dedent(
    f"""
    import os, time
    rank = int(os.environ["RANK"])
    for i in range({LINES}):
        print(f"r{{rank}} line {{i}}", flush=True)
        if i % 10 == 9:
            time.sleep(0.2)
    """
).lstrip()


@pytest.fixture
def job_root(tmp_path: Path) -> Path:
    """The store the server uses, unless a test module overrides it with a shared one."""
    return tmp_path / "jobs"


@pytest.fixture(scope="module")
def shared_root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for a whole module: a module opts in by overriding ``job_root`` with it, so one
    finished job serves several of its tests."""
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "jobs"


@pytest.fixture(scope="module")
def finished_job(shared_root: Path) -> str:
    """A job in the module's shared store that ran to success."""
    job = submit_job(shared_root)
    status = job.wait(timeout=120)
    assert status.phase.value == "Succeeded", status
    return job.id


@pytest.fixture
def jp_server_config(job_root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    # The extension exports the store root into os.environ; undo that after each test.
    monkeypatch.delenv(ROOT_ENV, raising=False)
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_disttrain": True}},
        "DistTrainApp": {
            "job_root": str(job_root),
            "default_backend": "local",
            "tensorboard_reload_interval": 1.0,
            "log_batch_lines": 25,  # small batches: the streams tests see several events
        },
    }


def submit_job(root: Path, world: int = 2, script: str = RANK_SCRIPT, name: str = "lines") -> Job:
    """A real local torchrun job (CPU, gloo-free: ranks just print) in the store at ``root``."""
    return submit(script, store=JobStore(root), name=name, gpus=world, accelerator="cpu")


CHECKOUT = str(Path(__file__).resolve().parents[2])


def run_checkout_job(root: Path, script: str, name: str, gpus: int = 2, **fields: Any) -> str:
    """A real local job whose ranks import this checkout's package (``em``), with no MLflow or
    Lightning setting inherited from the test's environment, run to success; its id."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", CHECKOUT)
        for name_ in ("MLFLOW_TRACKING_URI", "PL_TRAINER_DEFAULT_ROOT_DIR", "DISTTRAIN_HPARAMS"):
            mp.delenv(name_, raising=False)
        job = submit(script, store=JobStore(root), name=name, gpus=gpus, accelerator="cpu", **fields)
    status = job.wait(timeout=300)
    assert status.phase.value == "Succeeded", (status, [ln.text for ln in job.logs()][-30:])
    return job.id


def wait_for(predicate: Callable[[], Any], deadline: float = 60.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something true; a generous deadline, never a timing claim."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}")


def parse_sse(text: str) -> list[tuple[str, str | None, Any]]:
    """``(event, id, data)`` of each server-sent event in ``text`` (comments skipped)."""
    events = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            key, _, value = line.partition(": ")
            fields[key] = value
        if "event" in fields:
            events.append((fields["event"], fields.get("id"), json.loads(fields["data"])))
    return events


PYTHON = sys.executable


async def poll(check: Any, what: str, deadline: float = 90.0, every: float = 0.2) -> Any:
    """Await ``check()`` until it returns something truthy; fail after ``deadline`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while loop.time() < end:
        value = await check()
        if value:
            return value
        await asyncio.sleep(every)
    raise AssertionError(f"gave up waiting for {what}")
