"""A cancel waiting out its grace period does not hold up the server's shared worker pool."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import poll

# Ignores SIGTERM (but says so), so a cancel has to wait its whole grace period for SIGKILL.
STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, lambda *_: print("got SIGTERM", flush=True))
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    # One shared worker: a cancel held in it would block every listing.
    jp_server_config["DistTrainApp"]["worker_threads"] = 1
    return jp_server_config


async def test_listing_answers_while_a_cancel_waits_its_grace_period(jp_fetch: Any, job_root: Path) -> None:
    body = {
        "script": STUBBORN,
        "spec": {"name": "stubborn", "accelerator": "cpu", "options": {"grace_period": 20}},
    }
    submitted = await jp_fetch("disttrain", "api", "jobs", method="POST", body=json.dumps(body))
    job_id = json.loads(submitted.body)["id"]
    log = job_root / job_id / "logs" / "rank-0.log"

    async def said(text: str) -> bool:
        return log.exists() and text in log.read_text()  # read here, not through the server

    await poll(lambda: said("ready"), "the rank to start", deadline=120)
    cancel = asyncio.ensure_future(
        jp_fetch("disttrain", "api", "jobs", job_id, "cancel", method="POST", body="", request_timeout=120)
    )
    await poll(lambda: said("got SIGTERM"), "the cancel to have signalled the rank", deadline=60)
    assert not cancel.done()
    listing = await jp_fetch("disttrain", "api", "jobs", request_timeout=120)
    assert job_id in [j["id"] for j in json.loads(listing.body)["jobs"]]
    assert not cancel.done(), "the listing waited for the cancel"
    status = json.loads((await cancel).body)["status"]
    assert status["phase"] == "Cancelled"
