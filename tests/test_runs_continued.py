"""The runs view shows a restarted or resumed run as one curve: each step once, the earlier
attempt's or job's points up to the checkpoint's step, and the steps where it resumed."""

from __future__ import annotations

import json
from pathlib import Path

from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.tracking.runs import RunsReader


def write_points(run_dir: Path, steps: range, value: float) -> int:
    """Append a loss point per step; returns the file's size before them."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "metrics.jsonl"
    before = path.stat().st_size if path.exists() else 0
    with path.open("a") as f:
        for step in steps:
            f.write(
                json.dumps({"type": "train", "name": "loss", "value": value, "step": step, "time": 1.0})
                + "\n"
            )
    return before


def record(run_dir: Path, **extra: object) -> None:
    (run_dir / "run.json").write_text(json.dumps({"name": "r", "status": "finished", "ranks": "0", **extra}))


def curve(reader: RunsReader, job_dir: Path, limit: int = 1000) -> tuple[list[tuple[int, float]], list[int]]:
    """Every point of run r, page by page."""
    since, out = 0, []
    while True:
        detail = reader.detail(job_dir, job_dir.name, "r", JobPhase.SUCCEEDED, since=since, limit=limit)
        out += [(p.step, p.value) for p in detail.points]
        if not detail.more:
            return out, detail.resumed_at
        assert detail.next > since
        since = detail.next


def test_a_restarted_then_resumed_run_is_one_curve_with_each_step_once(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    write_points(old / "runs/r", range(8), 1.0)  # the first attempt: steps 0-7, killed
    offset = write_points(old / "runs/r", range(6, 10), 2.0)  # restarted from step 5's checkpoint
    record(old / "runs/r", restarts=[{"offset": offset, "step": 5}])
    reader = RunsReader()
    expected_old = [(s, 1.0) for s in range(6)] + [(s, 2.0) for s in range(6, 10)]
    assert curve(reader, old) == (expected_old, [5])

    # A new job resumed from the old one's checkpoint at step 8: the old curve up to 8, then its own.
    write_points(new / "runs/r", range(9, 13), 3.0)
    record(new / "runs/r", resumed_from={"job": "old", "run": "r", "step": 8})
    spec = {"resumed_from": {"job": "old", "checkpoint": "c1", "step": 8, "path": "/x", "job_dir": str(old)}}
    (new / "job.json").write_text(json.dumps({"id": "new", "spec": spec}))
    expected = expected_old[:9] + [(s, 3.0) for s in range(9, 13)]
    for limit in (1000, 3, 1):  # the same curve whatever the page size
        assert curve(reader, new, limit) == (expected, [5, 8])

    # A record naming a job its job.json does not (or a run name that is a path) shows its own points.
    record(new / "runs/r", resumed_from={"job": "other", "run": "r", "step": 8})
    assert curve(reader, new) == ([(s, 3.0) for s in range(9, 13)], [])
    record(new / "runs/r", resumed_from={"job": "old", "run": "../r", "step": 8})
    assert curve(reader, new)[0] == [(s, 3.0) for s in range(9, 13)]


def test_a_library_whose_step_n_checkpoint_logs_step_n_again_shows_it_once(tmp_path: Path) -> None:
    """Lightning's ``step=5`` checkpoint holds 5 optimizer steps: the resumed run logs step 5 again
    (its sixth batch), so the old run's points stop before the new run's first step."""
    old, new = tmp_path / "old", tmp_path / "new"
    write_points(old / "runs/r", range(8), 1.0)
    offset = write_points(old / "runs/r", range(5, 9), 2.0)  # restarted from "step 5": logs 5 again
    record(old / "runs/r", restarts=[{"offset": offset, "step": 5}])
    write_points(new / "runs/r", range(7, 10), 3.0)  # resumed from "step 7": logs 7 again
    record(new / "runs/r", resumed_from={"job": "old", "run": "r", "step": 7})
    spec = {"resumed_from": {"job": "old", "checkpoint": "c1", "step": 7, "path": "/x", "job_dir": str(old)}}
    (new / "job.json").write_text(json.dumps({"id": "new", "spec": spec}))
    expected = [(s, 1.0) for s in range(5)] + [(5, 2.0), (6, 2.0)] + [(s, 3.0) for s in range(7, 10)]
    assert curve(RunsReader(), new) == (expected, [5, 7])
