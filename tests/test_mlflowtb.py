"""The launcher's MLflow follower (``mlflowtb``) on a database written by the real MLflow: each
point lands once, as ``mlflow/<key>`` at its step, in the run's directory of the runs table."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain.tracking.mlflowdb import db_path
from jupyter_disttrain.tracking.mlflowtb import MlflowTensorBoard
from tests.em_helpers import tensorboard


@pytest.fixture
def mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    module = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db_path(tmp_path)}")
    return module


def test_new_rows_after_a_read_are_written_once(tmp_path: Path, mlflow: object) -> None:
    said: list[str] = []
    follower = MlflowTensorBoard(tmp_path, tmp_path / "tensorboard", said.append)
    assert follower.follow(batches=None) == 0  # no database yet: nothing, and nothing made
    assert not (tmp_path / "tensorboard").exists()
    with mlflow.start_run(run_name="tail"):  # type: ignore[attr-defined]
        for step in range(3):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)  # type: ignore[attr-defined]
        assert follower.follow(batches=None) == 3
        assert follower.follow(batches=None) == 0
        mlflow.log_metric("loss", 0.25, step=3)  # type: ignore[attr-defined]
        mlflow.log_metric("acc", float("nan"), step=3)  # type: ignore[attr-defined]
        assert follower.follow(batches=1) == 2
    follower.stop()
    scalars, _, _ = tensorboard(tmp_path / "tensorboard" / "_mlflow.tail")
    assert scalars["mlflow/loss"] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3)), (3, 0.25)]
    assert [step for step, _ in scalars["mlflow/acc"]] == [3]
    assert sorted(p.name for p in (tmp_path / "tensorboard").iterdir()) == ["_mlflow.tail"]
    assert said == []


def test_a_locked_database_is_read_at_the_next_poll(tmp_path: Path, mlflow: object) -> None:
    import sqlite3

    with mlflow.start_run(run_name="locked"):  # type: ignore[attr-defined]
        mlflow.log_metric("loss", 1.0, step=0)  # type: ignore[attr-defined]
    said: list[str] = []
    follower = MlflowTensorBoard(tmp_path, tmp_path / "tensorboard", said.append)
    holder = sqlite3.connect(db_path(tmp_path))
    holder.execute("BEGIN EXCLUSIVE")  # a writer mid-transaction: readers get "database is locked"
    assert follower.follow(batches=None) == 0
    holder.rollback()
    holder.close()
    assert follower.follow(batches=None) == 1
    follower.stop()
    assert said == []


def test_rows_that_hold_no_number_are_skipped_and_the_follower_goes_on(tmp_path: Path) -> None:
    from tests.em_helpers import hostile_mlflow_db

    hostile_mlflow_db(db_path(tmp_path))
    said: list[str] = []
    follower = MlflowTensorBoard(tmp_path, tmp_path / "tensorboard", said.append)
    assert follower.follow(batches=None) == 5  # every row read, the two without a number skipped
    follower.stop()
    assert said == []
    scalars, _, _ = tensorboard(tmp_path / "tensorboard" / "_mlflow.odd")
    assert sorted(scalars["mlflow/loss"]) == [(0, 0.25), (0, 1.0), (2, 0.5)]  # a step not a number: 0
