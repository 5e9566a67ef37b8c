"""A parameter-server job over the REST API: submitted with its launcher's options, then shown
with its roles (scheduler, server, worker), each replica's phase and its own log."""

from __future__ import annotations

import json
from typing import Any

from tests.test_mxnet_job import KV_CELL

from .conftest import poll


async def get_json(jp_fetch: Any, *parts: str, **kwargs: Any) -> Any:
    response = await jp_fetch("disttrain", "api", *parts, **kwargs)
    return json.loads(response.body)


async def test_an_mxnet_job_shows_its_roles(jp_fetch: Any, mxnet_python: str) -> None:
    body = {
        "script": "SHAPE = (2,)\n" + KV_CELL,
        "spec": {
            "name": "ps",
            "accelerator": "cpu",
            "launcher": "mxnet",
            "launcher_options": {"servers": 1, "workers": 2},
            "options": {"python": mxnet_python},
        },
    }
    response = await jp_fetch("disttrain", "api", "jobs", method="POST", body=json.dumps(body))
    job_id = json.loads(response.body)["id"]

    async def ended() -> Any:
        detail = await get_json(jp_fetch, "jobs", job_id)
        return detail if detail["summary"]["finish_time"] else None

    detail = await poll(ended, "the MXNet job to end", deadline=180)
    assert detail["status"]["phase"] == "Succeeded", detail["status"]["message"]
    assert detail["summary"]["launcher"] == "mxnet"
    assert detail["roles"] == [
        {"name": "scheduler", "replicas": 1},
        {"name": "server", "replicas": 1},
        {"name": "worker", "replicas": 2},
    ]
    replicas = [(r["name"], r["role"], r["phase"]) for r in detail["status"]["replicas"]]
    assert replicas == [
        ("scheduler", "scheduler", "Succeeded"),
        ("server-0", "server", "Succeeded"),
        ("worker-0", "worker", "Succeeded"),
        ("worker-1", "worker", "Succeeded"),
    ]
    pulled = []
    for replica in ("worker-0", "worker-1"):
        chunk = await get_json(jp_fetch, "jobs", job_id, "logs", params={"replica": replica})
        pulled += [line["text"] for line in chunk["lines"] if line["replica"] == replica]
    assert sorted(pulled) == ["worker 0 of 2 pulled 6", "worker 1 of 2 pulled 6"]
