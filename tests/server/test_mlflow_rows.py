"""An MLflow database whose rows hold NULL or text where numbers belong (SQLite takes anything in
any column): the runs list and the run's detail answer 200 with what is readable, never a 500."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.store import JobStore
from tests.em_helpers import hostile_mlflow_db


@pytest.fixture
def job_root(shared_root: Path) -> Path:
    return shared_root


async def get_json(jp_fetch: Any, *parts: str, **kwargs: Any) -> Any:
    return json.loads((await jp_fetch("disttrain", "api", *parts, **kwargs)).body)


async def test_rows_without_numbers_are_left_out_not_a_500(
    jp_fetch: Any, finished_job: str, shared_root: Path
) -> None:
    hostile_mlflow_db(JobStore(shared_root).job_dir(finished_job) / "mlflow.db")
    (row,) = (await get_json(jp_fetch, "runs", params={"job": finished_job}))["runs"]
    assert row["run"] == "_mlflow.odd" and row["status"] == "finished"
    assert row["metrics"] == {"mlflow/gap": 0.5}  # 'low' and NULL are no values
    assert row["hparams"] == {"lr": None, "opt": "sgd"}
    detail = await get_json(jp_fetch, "jobs", finished_job, "runs", "_mlflow.odd")
    points = [(p["value"], p["step"], p["time"]) for p in detail["points"]]
    assert points == [(1.0, 0, 1700000000.0), (0.5, 2, 0.0), (0.25, None, 0.0)]
    assert detail["more"] is False
