"""A job's checkpoint index (tracking/checkpoints.py) and resume's resolution (jobs/checkpoints.py),
on real torch.save files in a real store's job dirs, with an em run's files beside them."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends import rankenv
from jupyter_disttrain.jobs import checkpoints as jobcheckpoints
from jupyter_disttrain.jobs.manager import JobManager
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobSpec
from jupyter_disttrain.runtime import contract, retention
from jupyter_disttrain.server.jobs import JobService
from jupyter_disttrain.storage.store import JobRecord, JobStore

torch = pytest.importorskip("torch")

T0 = time.time() - 3600


def saved(path: Path, at: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"w": torch.arange(3.0)}, path)
    os.utime(path, (at, at))
    return path


def make_job(store: JobStore, job_id: str, **spec: object) -> Path:
    fields: dict[str, object] = {"nproc_per_node": 2, **spec}
    store.create(JobRecord(id=job_id, spec=JobSpec(name="train", **fields)), "print(1)\n")  # type: ignore[arg-type]
    return store.job_dir(job_id)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[JobManager, Path, Path]:
    store = JobStore(tmp_path / "jobs")
    job_dir = make_job(store, "train-a1")
    ckpts = job_dir / contract.CHECKPOINTS_DIR
    saved(ckpts / "step_10.pt", T0 + 10)
    saved(ckpts / "step_20.pt", T0 + 20)
    saved(ckpts / "model.pt", T0 + 25)  # no step in its name: the run's step before it
    cut = saved(ckpts / "step_30.pt", T0 + 30)
    cut.write_bytes(cut.read_bytes()[:100])  # cut off mid-write
    os.utime(cut, (T0 + 30, T0 + 30))
    outside = saved(tmp_path / "elsewhere" / "final.pt", T0 + 40)
    run = job_dir / contract.RUNS_DIR / "r1"
    run.mkdir(parents=True)
    (run / contract.RUN_FILE).write_text(json.dumps({"name": "r1"}))
    points = [
        {"type": "train", "name": "loss", "value": 1.0 / step, "step": step, "time": T0 + step}
        for step in range(1, 41)
    ]
    (run / contract.METRICS_FILE).write_text("".join(json.dumps(p) + "\n" for p in points))
    declared = {"path": str(outside), "step": 40, "time": "2026-01-01T00:00:00Z"}
    (run / contract.CHECKPOINTS_FILE).write_text(json.dumps(declared) + "\n" + '{"path": "rel.pt"}\n')
    return JobManager(store, "local"), job_dir, outside


def test_index_steps_metrics_ids_usage(setup: tuple[JobManager, Path, Path]) -> None:
    manager, job_dir, outside = setup
    listing = manager.checkpoints("train-a1")
    rows = [(c.step, c.step_source, c.complete, c.declared) for c in listing.checkpoints]
    assert rows == [
        (10, "name", True, False),
        (20, "name", True, False),
        (25, "em", True, False),
        (30, "name", False, False),
        (40, "declared", True, True),
    ]
    by_step = {c.step: c for c in listing.checkpoints}
    assert by_step[20].metrics == {"train/loss": pytest.approx(1 / 20)}
    assert by_step[40].path == str(outside) and by_step[40].run == "r1"
    assert all(re.fullmatch(r"c[0-9a-f]{12}", c.id) for c in listing.checkpoints)
    assert [c.id for c in manager.checkpoints("train-a1").checkpoints] == [c.id for c in listing.checkpoints]
    assert listing.dir == str(job_dir / contract.CHECKPOINTS_DIR)
    usage = listing.usage
    assert (usage.count, usage.complete, usage.latest) == (5, 4, by_step[40].id)
    assert usage.bytes == sum(c.size for c in listing.checkpoints) > 0
    assert manager.detail("train-a1").checkpoints == usage


def test_resume_resolves_into_the_spec_and_the_env(setup: tuple[JobManager, Path, Path]) -> None:
    manager, job_dir, outside = setup
    spec = manager.job_checkpoints.resolve(JobSpec(name="again", resume="train-a1:20"))
    assert spec.resumed_from is not None
    assert spec.resumed_from.path == str(job_dir / contract.CHECKPOINTS_DIR / "step_20.pt")
    assert (spec.resumed_from.job, spec.resumed_from.step, spec.resumed_from.kind) == (
        "train-a1",
        20,
        "torch",
    )
    env = rankenv.rank_env(spec, "j", "/jobs/j", cpu=True, working_dir=None, inherited={})
    assert env[contract.RESUME_FROM_ENV] == spec.resumed_from.path
    latest = manager.job_checkpoints.resolve(JobSpec(name="again", resume="train-a1"))
    assert latest.resumed_from is not None and latest.resumed_from.path == str(outside)
    by_id = manager.job_checkpoints.resolve(
        JobSpec(name="again", resume=f"train-a1:{spec.resumed_from.checkpoint}")
    )
    assert by_id.resumed_from == spec.resumed_from
    # A spec given resumed_from without resume (a client's JSON) has it cleared.
    assert (
        manager.job_checkpoints.resolve(JobSpec(name="x", resumed_from=spec.resumed_from)).resumed_from
        is None
    )
    # A job resumed from it pins it (retention keeps it).
    again = manager.submit(JobSpec(name="again", resume="train-a1:20"), "print(1)\n")
    pinned = [c.step for c in manager.checkpoints("train-a1").checkpoints if c.pinned]
    assert pinned == [20]
    assert manager.checkpoints(again).resumed_from == spec.resumed_from
    assert api.Job(again, manager.store).wait(timeout=120).phase.value == "Succeeded"


@pytest.mark.parametrize(
    ("resume", "says"),
    [
        ("nosuch-job", "there is no job nosuch-job"),
        ("train-a1:15", "has no checkpoint at step 15: its steps are 10, 20, 25, 30, 40"),
        ("train-a1:30", "is incomplete"),
        ("train-a1:c000000000000", "has no checkpoint c000000000000"),
    ],
)
def test_bad_resume_is_one_line_and_nothing_launched(
    setup: tuple[JobManager, Path, Path], resume: str, says: str
) -> None:
    manager, _, _ = setup
    before = manager.store.ids()
    with pytest.raises(InvalidSpecError, match=re.escape(says)) as info:
        manager.submit(JobSpec(name="again", resume=resume), "print(1)\n")
    assert "\n" not in str(info.value)
    assert manager.store.ids() == before


def test_deepspeed_world_size_and_no_checkpoints(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs")
    manager = JobManager(store, "local")
    make_job(store, "empty-1")
    with pytest.raises(InvalidSpecError, match="has no checkpoints"):
        manager.job_checkpoints.resolve(JobSpec(name="x", resume="empty-1"))
    save_dir = make_job(store, "ds-1") / contract.CHECKPOINTS_DIR
    tag = save_dir / "global_step5"
    saved(tag / "mp_rank_00_model_states.pt", T0)
    for rank in range(2):
        saved(tag / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", T0)
    (save_dir / "latest").write_text("global_step5")
    os.utime(save_dir / "latest", (T0, T0))
    with pytest.raises(InvalidSpecError, match=r"written by 2 ranks, the new job has 4: use the same --gpus"):
        manager.job_checkpoints.resolve(JobSpec(name="x", nproc_per_node=4, resume="ds-1"))
    same = manager.job_checkpoints.resolve(JobSpec(name="x", nproc_per_node=2, resume="ds-1:5"))
    assert same.resumed_from is not None and same.resumed_from.path == str(tag)


def test_keep_checkpoints_must_not_be_negative() -> None:
    with pytest.raises(InvalidSpecError, match="--keep-checkpoints must be 0"):
        JobSpec(name="x", keep_checkpoints=-1).validate()


def test_only_checkpoints_inside_the_job_dir_are_served(setup: tuple[JobManager, Path, Path]) -> None:
    manager, job_dir, outside = setup
    by_path = {c.path: c for c in manager.checkpoints("train-a1").checkpoints}
    inside = by_path[str(job_dir / contract.CHECKPOINTS_DIR / "step_10.pt")]
    assert manager.job_checkpoints.downloadable("train-a1", inside.id) == inside
    with pytest.raises(InvalidSpecError, match="is outside the job's directory"):
        manager.job_checkpoints.downloadable("train-a1", by_path[str(outside)].id)


def test_a_pin_that_cannot_be_written_does_not_stop_the_resume(setup: tuple[JobManager, Path, Path]) -> None:
    manager, job_dir, _ = setup
    (job_dir / contract.CHECKPOINT_PINS_FILE).mkdir()  # no file can replace it (as a read-only dir)
    job_id = manager.submit(JobSpec(name="again", resume="train-a1:10"), "print(1)\n")
    assert api.Job(job_id, manager.store).wait(timeout=120).phase.value == "Succeeded"
    assert (job_dir / contract.CHECKPOINT_PINS_FILE).is_dir()


def test_declared_paths_share_one_budget_and_each_checkpoint_is_listed_once(tmp_path: Path) -> None:
    """50 declared directories that are one directory of 200 checkpoints by other names (links
    above it), and its parent: listed once each, within one entry budget, ``more`` past it."""
    store = JobStore(tmp_path / "jobs")
    manager = JobManager(store, "local")
    job_dir = make_job(store, "decl-a1")
    real = tmp_path / "data" / "ckpts"
    data = saved(real / "step_0.pt", T0).read_bytes()
    for step in range(1, 200):
        (real / f"step_{step}.pt").write_bytes(data)
        os.utime(real / f"step_{step}.pt", (T0, T0))
    (tmp_path / "links").mkdir()
    paths = [real.parent, real]
    for index in range(50):
        os.symlink(tmp_path / "data", tmp_path / "links" / f"l{index}")
        paths.append(tmp_path / "links" / f"l{index}" / "ckpts")
    run = job_dir / contract.RUNS_DIR / "r1"
    run.mkdir(parents=True)
    (run / contract.RUN_FILE).write_text(json.dumps({"name": "r1"}))
    (run / contract.CHECKPOINTS_FILE).write_text("".join(json.dumps({"path": str(p)}) + "\n" for p in paths))
    listing = manager.checkpoints("decl-a1")
    assert len(listing.checkpoints) == 200 and not listing.usage.more
    assert {os.path.realpath(c.path) for c in listing.checkpoints} == {str(p) for p in real.iterdir()}
    small = manager.job_checkpoints.listing("decl-a1", limit=120)
    assert small.usage.more and 0 < len(small.checkpoints) <= 120
    assert manager.detail("decl-a1").checkpoints == listing.usage


def test_a_jobs_details_wait_for_its_checkpoints_a_bounded_time(
    setup: tuple[JobManager, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    manager, _, _ = setup
    monkeypatch.setattr(jobcheckpoints, "DETAIL_SCAN_LIMIT", 3)
    usage = manager.detail("train-a1").checkpoints
    assert usage is not None and usage.more and usage.count <= 3  # fewer entries than a listing's
    assert not manager.checkpoints("train-a1").usage.more
    # A scan that never returns (a hung file system, stood in for by an index that waits):
    # the details come without it after USAGE_SECONDS.
    monkeypatch.setattr(jobcheckpoints, "USAGE_SECONDS", 0.5)
    release = threading.Event()
    monkeypatch.setattr(manager.job_checkpoints.index, "index", lambda *a, **k: release.wait(60))
    try:
        detail = manager.detail("train-a1")
        assert detail.checkpoints is None and detail.summary.id == "train-a1"
    finally:
        release.set()


def test_a_resume_answers_what_it_launched_and_pins_once_accepted(
    setup: tuple[JobManager, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, job_dir, _ = setup
    service = JobService(JobStore(job_dir.parent), "local")
    manager = service.manager
    step_20 = job_dir / contract.CHECKPOINTS_DIR / "step_20.pt"
    # Refused by its backend (more processes than CPUs): launched nothing, pinned nothing.
    big = make_job(manager.store, "big-a1", nproc_per_node=4096)
    saved(big / contract.CHECKPOINTS_DIR / "step_5.pt", T0)
    before = manager.store.ids()
    with pytest.raises(InvalidSpecError, match="4096 processes"):
        service.resume("big-a1", {"checkpoint": 5})
    assert manager.store.ids() == before and retention.pins(str(big)) == (set(), {})
    # The checkpoint removed as the job launches (by its own script, a prune, a user): the
    # answer still names the checkpoint the job got, as a success.
    backend = manager.backend("local")
    submit = backend.submit

    def submit_then_remove(*args: object, **kwargs: object) -> str:
        job_id = submit(*args, **kwargs)  # type: ignore[arg-type]
        step_20.unlink()
        return job_id

    monkeypatch.setattr(backend, "submit", submit_then_remove)
    answer = service.resume("train-a1", {"checkpoint": 20})
    resumed = manager.store.read_record(answer["id"]).spec.resumed_from
    assert resumed is not None and answer["checkpoint"]["id"] == resumed.checkpoint
    assert (answer["checkpoint"]["path"], resumed.path, resumed.step) == (str(step_20), str(step_20), 20)
    assert retention.pins(str(job_dir)) == ({str(step_20)}, {answer["id"]: str(step_20)})
    assert api.Job(answer["id"], manager.store).wait(timeout=120).phase.value == "Succeeded"
    # Purged, the job no longer holds the checkpoint it resumed from.
    manager.delete(answer["id"], purge=True)
    assert retention.pins(str(job_dir)) == (set(), {})
