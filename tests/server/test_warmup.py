"""The server reads its job store once as it starts, so the UI's first listing is quick."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus
from jupyter_disttrain.server.context import SETTINGS_KEY
from jupyter_disttrain.storage.store import JobRecord, JobStore


@pytest.fixture
def job_root(tmp_path: Path) -> Path:
    """A store with one ended job in it before the server starts."""
    store = JobStore(tmp_path / "jobs")
    record = JobRecord(id="ended-00000", spec=JobSpec(name="ended", accelerator="cpu"))
    store.create(record, "print(1)\n")
    store.write_status(JobStatus(job_id=record.id, phase=JobPhase.SUCCEEDED))
    return store.root


async def test_the_store_is_read_once_as_the_server_starts(jp_serverapp: Any, jp_fetch: Any) -> None:
    service = jp_serverapp.web_app.settings[SETTINGS_KEY].service
    for _ in range(600):  # the warm-up runs in a worker thread; give it up to a minute
        if "ended-00000" in service.manager._ended:
            break
        await asyncio.sleep(0.1)
    warmed = service.manager._ended["ended-00000"].summary
    listed = json.loads((await jp_fetch("disttrain", "api", "jobs")).body)["jobs"]
    assert listed == [warmed] and warmed["phase"] == "Succeeded"
