"""A server with no job root configured lists the jobs of every root the user has used (the
index of job roots), not only those under its own root_dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.storage.store import ROOT_ENV

from .conftest import poll, submit_job


@pytest.fixture
def jp_server_config(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.delenv(ROOT_ENV, raising=False)  # nothing narrows the search
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_disttrain": True}},
        "DistTrainApp": {"default_backend": "local"},
    }


async def test_a_job_under_another_root_is_listed(jp_fetch: Any, jp_root_dir: Path, tmp_path: Path) -> None:
    own = (jp_root_dir / ".disttrain" / "jobs").resolve()
    listing = json.loads((await jp_fetch("disttrain", "api", "jobs")).body)
    assert listing == {"jobs": [], "roots": [str(own)]}

    elsewhere = tmp_path / "project" / ".disttrain" / "jobs"
    job = submit_job(elsewhere, world=1)  # recorded in the index as it is created

    async def listed() -> Any:
        body = json.loads((await jp_fetch("disttrain", "api", "jobs")).body)
        return body if [j["id"] for j in body["jobs"]] == [job.id] else None

    body = await poll(listed, "the other root's job in the listing")
    assert body["roots"] == [str(own), str(elsewhere.resolve())]
    detail = json.loads((await jp_fetch("disttrain", "api", "jobs", job.id)).body)
    assert detail["id"] == job.id
    job.wait(timeout=120)
