"""The stall and idle guard: its judgement on series fed to it (a fake NVML series, progress at
chosen times), its settings (flags, $DISTTRAIN_GUARD), and real jobs its launcher guards."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.jobs.manager import manager_for
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.monitoring import guard
from jupyter_disttrain.monitoring.guard import Guard, GuardOptions, GuardSettings, StallJudge
from jupyter_disttrain.storage import procs
from jupyter_disttrain.storage.store import JobStore


def _gpu(t: float, util: float) -> dict[str, object]:
    """One sample as the sampler writes it for a rank with one GPU (NVML's fields)."""
    return {
        "t": t,
        "cpu_percent": 99.0,
        "gpus": [{"index": 0, "util_percent": util, "mem_used_bytes": 1, "mem_total_bytes": 2}],
    }


def test_a_fake_nvml_series_at_1_percent_is_idle_only_after_the_minimum_sample_count() -> None:
    settings = GuardSettings(idle_below=5.0, idle_window=10.0, stall_floor=1e6)
    judge = Guard(settings, start=0.0, interval=1.0)
    needed = judge_min = max(guard.MIN_SAMPLES, 5)  # half the window's 10 samples, at least 5
    for i in range(needed - 1):
        judge.add_samples("rank-0", [_gpu(float(i), 1.0)])
        assert judge.judge(float(i)) is None  # too few samples to say: never idle yet
    judge.add_samples("rank-0", [_gpu(float(judge_min - 1), 1.0)])
    state = judge.judge(float(judge_min - 1))
    assert state is not None and state.state == "idle" and not state.busy
    assert state.message.startswith("idle: utilisation under 5 % for 10 s (rank-0 1 %)")
    assert judge.judge(float(judge_min)) is None  # said once per episode
    # the GPU is what counts (its CPU is busy at 99 %); a busy GPU ends the episode
    for t in range(judge_min, judge_min + 12):
        judge.add_samples("rank-0", [_gpu(float(t), 90.0)])
    assert judge.judge(float(judge_min + 12)) is None and judge.state is None


def test_every_replica_must_be_idle_and_a_cpu_job_is_judged_by_its_cpu() -> None:
    judge = Guard(GuardSettings(idle_below=5.0, idle_window=5.0, stall_floor=1e6), 0.0, 1.0)
    for t in range(8):
        judge.add_samples("rank-0", [{"t": float(t), "cpu_percent": 0.5}])
        judge.add_samples("rank-1", [{"t": float(t), "cpu_percent": 40.0}])
    assert judge.judge(8.0) is None
    judge.forget(["rank-1"])  # it ended
    state = judge.judge(8.0)
    assert state is not None and state.state == "idle"


def test_stalled_after_k_times_the_median_step_time_or_the_floor() -> None:
    judge = StallJudge(factor=10, floor=120, start=0.0)
    assert not judge.stalled(120.0) and judge.stalled(120.5)  # no progress yet: the floor from the start
    for step, t in enumerate([100.0, 130.0, 160.0, 190.0]):
        assert judge.see(step, t)
    assert not judge.see(3, 200.0)  # the same value is no progress
    assert judge.threshold == 300.0  # 10 x the median gap of 30 s
    assert not judge.stalled(190.0 + 299) and judge.stalled(190.0 + 301)


def test_a_stall_is_busy_when_the_processes_keep_working() -> None:
    judge = Guard(GuardSettings(stall_floor=5.0, stall_factor=10.0), 0.0, 1.0)
    for t in range(10):
        judge.add_samples("rank-0", [{"t": float(t), "cpu_percent": 100.0}])
    state = judge.judge(10.0)
    assert state is not None and (state.state, state.busy) == ("stalled", True)
    assert state.message.startswith("stalled, busy: its processes keep working; no progress")
    judge.see_progress(1, 11.0)
    assert judge.state is None  # progress ends the stall


def test_the_settings_come_from_the_flags_then_disttrain_guard_then_the_defaults() -> None:
    env = {guard.GLOBAL_ENV: "guard=cancel, stall_floor=300,idle-window=60"}
    resolved = guard.resolve(GuardOptions(stall_floor=30.0), env)
    assert resolved == GuardSettings(action="cancel", stall_factor=10.0, stall_floor=30.0, idle_window=60.0)
    assert guard.resolve(GuardOptions(), {}) == GuardSettings()
    assert GuardSettings.from_json({}).action == "off"  # a job recorded before the guard
    for bad, said in [
        ("guard=stop", "DISTTRAIN_GUARD: guard must be one of notify, diagnose, cancel, off, not 'stop'"),
        ("stall_floor=soon", "DISTTRAIN_GUARD: stall_floor must be a number, not 'soon'"),
        ("idle_below=200", "DISTTRAIN_GUARD: idle_below must be a number from 0 to 100, not 200.0"),
        ("nap=1", "DISTTRAIN_GUARD: 'nap=1' is not NAME=VALUE with NAME one of guard, stall_factor"),
    ]:
        with pytest.raises(InvalidSpecError) as err:
            guard.from_env({guard.GLOBAL_ENV: bad})
        assert str(err.value).startswith(said)


def test_a_bad_guard_flag_is_refused_naming_it_and_the_dry_run_says_the_guard(store: JobStore) -> None:
    with pytest.raises(
        InvalidSpecError, match="guard must be one of notify, diagnose, cancel, off, not 'nap'"
    ):
        api.dryrun("print(1)", store=store, accelerator="cpu", options={"guard": "nap"})
    with pytest.raises(InvalidSpecError, match=r"stall_floor must be a number from 0\.5 to"):
        api.dryrun("print(1)", store=store, accelerator="cpu", options={"stall_floor": 0})
    dry = api.dryrun(
        "print(1)", store=store, accelerator="cpu", options={"guard": "diagnose", "stall_floor": 60}
    )
    assert dry.request.guard["action"] == "diagnose"  # type: ignore[attr-defined]
    assert "# guard: diagnose when stalled (no progress for max(10 x the median step time, 60 s))" in dry.text


def _events(job: api.Job, reason: str) -> list[str]:
    return [e.message for e in job.status().events if e.reason == reason]


def _wait(check, deadline: float = 120.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + deadline
    while not (found := check()):
        assert time.monotonic() < end
        time.sleep(0.2)
    return found


# Progress on a tqdm bar, then none: the ranks loop without a step.
STALLS = """
import time
from tqdm import tqdm
from jupyter_disttrain import em

em.on_preempt(lambda: print("preempt hook: checkpoint saved", flush=True))
for i in tqdm(range(6)):
    time.sleep(0.3)
print("stuck from here", flush=True)
while True:
    time.sleep(0.1)
"""


def test_a_stalled_loop_is_flagged_at_its_threshold_and_cancel_ends_it_after_the_preempt_hook(
    store: JobStore,
) -> None:
    options = {"guard": "cancel", "stall_floor": 3, "stall_factor": 2, "monitor_interval": 0.5, "cold": True}
    job = api.submit(STALLS, store=store, gpus=1, accelerator="cpu", options=options)
    status = job.wait(timeout=120)
    assert (status.phase, status.reason) == (JobPhase.CANCELLED, "Cancelled"), status
    assert status.message is not None and status.message.startswith("cancelled by the guard (stalled, idle: ")
    (stalled,) = _events(job, "Stalled")
    quiet = float(stalled.split("no progress (steps, the tqdm bar, collectives) for ")[1].split(" s")[0])
    assert 3 <= quiet <= 6, stalled  # flagged at its threshold (3 s), give or take a look
    assert stalled.endswith("(threshold 3 s) (guard: cancel)")
    (diagnosed,) = _events(job, "Diagnosed")  # cancel diagnoses first: no collective record here
    assert diagnosed.startswith(
        "no collective record: the ranks have not used torch.distributed; rank-0 is at train.py"
    )
    assert "preempt hook: checkpoint saved" in (job.dir / "logs" / "rank-0.log").read_text()
    detail = manager_for(store).detail(job.id)
    assert [i.trigger for i in detail.incidents] == ["stalled"]
    assert procs.wait_gone(job.id, timeout=30)


BUSY = """
import time
print("busy", flush=True)
while True:
    sum(range(10000))
"""


def test_a_busy_loop_without_steps_is_stalled_busy_not_idle(store: JobStore) -> None:
    options = {"stall_floor": 3, "idle_window": 3, "monitor_interval": 0.25, "cold": True}
    job = api.submit(BUSY, store=store, gpus=1, accelerator="cpu", options=options)
    try:
        (stalled,) = _wait(lambda: _events(job, "Stalled"))
        assert stalled.startswith("stalled, busy: its processes keep working; no progress")
        assert stalled.endswith("(guard: notify)")  # the default action: an event, the sidebar
        summary = next(s for s in manager_for(store).list_jobs() if s.record.id == job.id).summary
        assert summary["guard"]["state"] == "stalled" and summary["guard"]["busy"] is True
        time.sleep(2)  # a few more looks: it burns CPU, so it is never idle
        assert _events(job, "Idle") == [] and not job.status().is_terminal
    finally:
        job.cancel()


SLEEPS = """
import time
print("sleeping", flush=True)
time.sleep(600)
"""


def test_a_job_doing_nothing_is_idle(store: JobStore) -> None:
    options = {"idle_window": 2, "idle_below": 5, "monitor_interval": 0.25, "cold": True}
    job = api.submit(SLEEPS, store=store, gpus=2, accelerator="cpu", options=options)
    try:
        (idle,) = _wait(lambda: _events(job, "Idle"))
        assert idle.startswith("idle: utilisation under 5 % for 2 s (rank-0 0 %, rank-1 0 %)"), idle
        assert guard.read_state(job.dir) is not None
    finally:
        job.cancel()
    assert manager_for(store).list_jobs()[0].summary.get("guard") is None  # ended: no guard state


BURNS = """
import time, psutil
end = time.process_time() + 3
while time.process_time() < end:
    pass
t = psutil.Process().cpu_times()
print("cpu", t.user + t.system + t.children_user + t.children_system, flush=True)
"""


def test_core_hours_are_within_2_percent_of_psutils_cpu_times_and_priced(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTTRAIN_PRICES", '{"core": 0.5, "gpu": 3, "currency": "EUR"}')
    job = api.submit(
        BURNS, store=store, gpus=2, accelerator="cpu", options={"monitor_interval": 0.5, "cold": True}
    )
    assert job.wait(timeout=120).phase is JobPhase.SUCCEEDED
    said = sum(float(ln.text.split()[-1]) for ln in job.logs() if ln.text.startswith("cpu "))
    hours = manager_for(store).detail(job.id).hours
    assert hours is not None and hours.unit == "core"
    assert hours.used * 3600 == pytest.approx(said, rel=0.02)
    assert hours.allocated >= hours.used  # two ranks' cores for the whole run
    assert (hours.cost, hours.currency) == (pytest.approx(hours.allocated * 0.5, abs=1e-3), "EUR")
    assert Path(job.dir / "metrics").is_dir()
