"""Reading what ``em`` wrote, the way a reader outside the training process would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def metric_lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), "metrics.jsonl ends with a whole line"
    return [json.loads(line) for line in text.splitlines()]


def run_record(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run.json").read_text(encoding="utf-8"))


def tensorboard(logdir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, Any], list[str]]:
    """(scalars by tag as (step, value), the session's hparams, the experiment's metric tags)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    hparams: dict[str, Any] = {}
    metrics: list[str] = []
    try:
        tagged = acc.PluginTagToContent("hparams")
    except KeyError:  # no hparams written
        tagged = {}
    for content in tagged.values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        for name, value in data.session_start_info.hparams.items():
            hparams[name] = getattr(value, value.WhichOneof("kind"))
        metrics += [m.name.tag for m in data.experiment.metric_infos]
    return scalars, hparams, metrics


# The tables and columns of MLflow's tracking database that ``mlflowdb`` reads.
MLFLOW_TABLES = """
    CREATE TABLE runs (run_uuid, name, status, start_time, end_time, lifecycle_stage);
    CREATE TABLE params (run_uuid, key, value);
    CREATE TABLE latest_metrics (run_uuid, key, value, is_nan, step);
    CREATE TABLE metrics (run_uuid, key, value, is_nan, step, timestamp);
"""


def hostile_mlflow_db(path: Path) -> None:
    """An MLflow tracking database (the tables and columns ``mlflowdb`` reads) whose rows hold
    what SQLite lets any writer put there: NULL or text for a value, a step or a timestamp, a time
    beyond what a datetime holds; between them, good rows: loss 1.0 and 0.5 at steps 0 and 2."""
    import sqlite3

    con = sqlite3.connect(path)
    con.executescript(
        MLFLOW_TABLES
        + """
        INSERT INTO runs VALUES ('u1', 'odd', 'FINISHED', 'yesterday', 99999999999999999, 'active');
        INSERT INTO params VALUES ('u1', 'lr', NULL), ('u1', 'opt', 'sgd');
        INSERT INTO latest_metrics VALUES ('u1', 'loss', 'low', 0, 'last'), ('u1', 'acc', NULL, 0, 3),
            ('u1', 'gap', 0.5, 0, 2);
        INSERT INTO metrics VALUES
            ('u1', 'loss', 1.0, 0, 0, 1700000000000),
            ('u1', 'loss', NULL, 0, 1, 1700000001000),
            ('u1', 'loss', 'high', 0, 1, 1700000001000),
            ('u1', 'loss', 0.5, 0, 2, 'noon'),
            ('u1', 'loss', 0.25, 0, 'three', NULL);
        """
    )
    con.commit()
    con.close()
