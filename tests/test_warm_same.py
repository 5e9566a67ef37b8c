"""A warm job ends as the same job run cold: its status, events, replicas, rank and run records are
equal field by field, but for what differs between any two runs (ids, times, pids, the start
path the Started event names), its job dir holds the same files, and it leaves nothing in its
TMPDIR: torchrun's error files live in the job dir. Real zygote, real torchrun, 2 gloo CPU ranks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.warm import plan as warm
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

JOBS = {
    "prints": "print('hello')\n",  # no torch at all: no process group to have joined
    "raises": "import os\nif os.environ['RANK'] == '1':\n    raise ValueError('bad batch')\nprint('ok')\n",
    "ddp": (
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.ones(1)\ndist.all_reduce(t)\nprint('sum', t.item())\n"
        "dist.destroy_process_group()\n"
    ),
    "tracks": (  # an em run: its record
        "from jupyter_disttrain import em\n"
        "run = em.create_run('r', hparams={'lr': 0.1})\n"
        "run.log('train', {'loss': 1.0}, step=1)\nrun.finish()\n"
    ),
}
# Differ between any two runs of one job, warm or cold.
PER_RUN = {
    "time",
    "start_time",
    "finish_time",
    "end_time",
    "created",
    "updated",
    "pid",
    "cpu_seconds",
    "host",
}


def _same_parts(data: Any, job_id: str) -> Any:
    """``data`` without what differs between any two runs; the job's id in its place."""
    if isinstance(data, dict):
        return {k: _same_parts(v, job_id) for k, v in data.items() if k not in PER_RUN}
    if isinstance(data, list):
        return [_same_parts(v, job_id) for v in data]
    if isinstance(data, str):
        data = data.replace(job_id, "JOB")
        return re.sub(r" \((warm|cold): .*\)$", " (PATH)", data)  # Started: which path, and why
    return data


def _differ(hot: Any, cold: Any, at: str = "") -> list[tuple[str, Any, Any]]:
    """Where ``hot`` and ``cold`` differ: each path, warm's value and cold's."""
    if isinstance(hot, dict) and isinstance(cold, dict):
        return [d for k in {*hot, *cold} for d in _differ(hot.get(k), cold.get(k), f"{at}/{k}")]
    if isinstance(hot, list) and isinstance(cold, list) and len(hot) == len(cold):
        return [d for i, (h, c) in enumerate(zip(hot, cold, strict=True)) for d in _differ(h, c, f"{at}/{i}")]
    return [] if hot == cold else [(at, hot, cold)]


def _ended(
    store: JobStore, monkeypatch: pytest.MonkeyPatch, script: str, how: str, tmp: Path
) -> dict[str, Any]:
    monkeypatch.setenv(warm.WARM_ENV, "1" if how == "warm" else "0")
    job = api.submit(script, store=store, gpus=2, name="same", env={"TMPDIR": str(tmp)})
    status = job.wait(timeout=120)
    assert status.phase.is_terminal
    assert f"({how}:" in next(e.message for e in status.events if e.reason == "Started")
    # torchrun's error files are the job's (--log-dir): none of its temporary dirs is left behind
    assert not list(tmp.iterdir()), (how, list(tmp.iterdir()))
    ranks_dirs = sorted(p.name for p in job.dir.glob(f"torchelastic/{job.id}_*/attempt_0/*"))
    assert ranks_dirs == ["0", "1"], how  # where each rank's TORCHELASTIC_ERROR_FILE goes
    ranks = {p.name: json.loads(p.read_text()) for p in sorted((job.dir / "ranks").glob("*.json"))}
    saved = json.loads((job.dir / "status.json").read_text())
    # What the job dir holds (torchrun's run dir is named <job id>_<random>)
    files = sorted(
        re.sub(rf"{job.id}_\w+|tfevents\.[\w.]+", "ONE", str(p.relative_to(job.dir)))
        for p in job.dir.rglob("*")
    )
    runs = {p.parent.name: json.loads(p.read_text()) for p in job.dir.glob("runs/*/run.json")}
    return _same_parts({"status": saved, "ranks": ranks, "files": files, "runs": runs}, job.id)


def test_a_warm_job_ends_as_the_same_job_cold(
    store: JobStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tmp = tmp_path / "tmp"  # the jobs' TMPDIR
    tmp.mkdir()
    for name, script in JOBS.items():
        cold = _ended(store, monkeypatch, script, "cold", tmp)
        hot = _ended(store, monkeypatch, script, "warm", tmp)
        assert hot == cold, (name, _differ(hot, cold))
        events = [(e["type"], e["reason"]) for e in cold["status"]["events"]]
        assert ("Warning", "RanksNotJoined") not in events, name  # a job that never imported torch
        if name == "raises":
            assert cold["status"]["phase"] == JobPhase.FAILED.value, name
            assert "ValueError: bad batch" in cold["status"]["message"], name
        else:
            assert cold["status"]["phase"] == JobPhase.SUCCEEDED.value, name
