"""An MLflow database whose rows hold NULL or text where numbers belong (SQLite takes anything in
any column): the runs list and the run's detail answer 200 with what is readable, never a 500."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus
from jupyter_disttrain.storage.store import JobRecord, JobStore
from jupyter_disttrain.tracking import mlflowdb
from tests.em_helpers import MLFLOW_TABLES, hostile_mlflow_db


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


BLOB = b"\xff\xfe" + "lr é".encode()  # no UTF-8 text: an undecodable start, then valid bytes


def blob_mlflow_db(path: Path) -> None:
    """MLflow's four tables with a BLOB in every column they read, one column per row, between
    good rows (SQLite keeps a blob in any column, as it keeps text in a number's)."""
    con = sqlite3.connect(path)
    con.executescript(MLFLOW_TABLES)
    b = BLOB
    rows = {
        "runs": [
            ("u1", "blobs", "FINISHED", 1700000000000, 1700000001000, "active"),
            (b, b, b, b, b, "active"),  # every column but the one that makes it listed
            ("u3", "hidden", "FINISHED", 0, 0, b),
        ],
        "params": [("u1", "opt", "sgd"), ("u1", "lr", b), ("u1", b, "x"), (b, "k", "v")],
        "latest_metrics": [
            ("u1", "loss", 0.5, 0, 2),
            ("u1", b, 0.25, 0, 1),
            ("u1", "acc", b, 0, 1),
            ("u1", "gap", 0.75, b, b),
            (b, "loss", 1.0, 0, 0),
        ],
        "metrics": [
            ("u1", "loss", 1.0, 0, 0, 1700000000000),
            ("u1", b, 2.0, 0, 1, 1700000000000),
            ("u1", "loss", b, 0, 2, 1700000000000),
            ("u1", "loss", 3.0, b, b, b),
            (b, "loss", 4.0, 0, 0, 0),
        ],
    }
    for table, values in rows.items():
        marks = ", ".join("?" * len(values[0]))
        con.executemany(f"INSERT INTO {table} VALUES ({marks})", values)
    con.commit()
    con.close()


async def test_a_blob_in_any_column_reads_as_text_not_a_500(jp_fetch: Any, shared_root: Path) -> None:
    store = JobStore(shared_root)
    job_id = store.new_job_id("blobs")
    store.create(JobRecord(id=job_id, spec=JobSpec(name="blobs")), "print(1)\n")
    store.write_status(JobStatus(job_id=job_id, phase=JobPhase.SUCCEEDED))
    blob_mlflow_db(store.job_dir(job_id) / "mlflow.db")
    text = BLOB.decode("utf-8", "replace")

    rows = {r["run"]: r for r in (await get_json(jp_fetch, "runs", params={"job": job_id}))["runs"]}
    assert set(rows) == {"_mlflow.blobs", "_mlflow." + text}, rows  # the hidden run stays hidden
    good = rows["_mlflow.blobs"]
    assert good["hparams"] == {"opt": "sgd", "lr": text, text: "x"}
    assert good["metrics"] == {"mlflow/loss": 0.5, f"mlflow/{text}": 0.25, "mlflow/gap": 0.75}
    assert rows["_mlflow." + text]["status"] == "failed"  # a status no one wrote
    detail = await get_json(jp_fetch, "jobs", job_id, "runs", "_mlflow.blobs")
    points = [(p["name"], p["value"], p["step"], p["time"]) for p in detail["points"]]
    assert points == [("loss", 1.0, 0, 1700000000.0), (text, 2.0, 1, 1700000000.0), ("loss", 3.0, None, 0.0)]
    # what the TensorBoard follower reads: every row, each key and run as text
    read = [(r.uuid, r.key, r.value) for r in mlflowdb.metric_rows(store.job_dir(job_id), 0, 100)]
    assert read == [
        ("u1", "loss", 1.0),
        ("u1", text, 2.0),
        ("u1", "loss", None),
        ("u1", "loss", 3.0),
        (text, "loss", 4.0),
    ]
