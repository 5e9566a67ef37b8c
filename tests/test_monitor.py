"""The resource sampler on its own: bounded series files, real process trees, NVML's structures,
and liveness ("quiet") from the samples' output times."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_disttrain.monitoring import resources
from jupyter_disttrain.monitoring.resources import (
    History,
    ReplicaState,
    SeriesTails,
    quiet_after,
    quiet_replicas,
    read_resources,
    thin,
    usual_interval,
)
from jupyter_disttrain.payloads import to_json
from jupyter_disttrain.runtime import sampler
from jupyter_disttrain.runtime.sampler import Gpus, Monitor, SeriesFile, compacted, read_series

# Every test on both paths of the local backend: warm (forked from the zygote) and cold.
pytestmark = pytest.mark.usefixtures("start_path")

MB = 1 << 20
WEEK = 7 * 24 * 3600


# -- bounded series ----------------------------------------------------------------------------
def test_a_week_of_samples_stays_under_a_few_mb_and_covers_the_week(tmp_path: Path) -> None:
    # Every 6 s rather than 2 (a third of the appends, for the test's time): the file's bound is
    # its size limit whatever the interval, and what is kept depends on the samples' ages.
    series = SeriesFile(str(tmp_path / "rank-0.jsonl"))
    start = 1_700_000_000.0
    sizes = []
    for i in range(WEEK // 6):
        t = start + 6 * i
        series.append({"t": t, "cpu_percent": 99.5, "rss_bytes": 123456789, "threads": 12, "out": t - 1})
        if i % 5000 == 0:
            sizes.append(series.size)
    size = (tmp_path / "rank-0.jsonl").stat().st_size
    assert size <= sampler.MAX_BYTES and max(sizes) <= sampler.MAX_BYTES
    kept = read_series(str(tmp_path / "rank-0.jsonl"))
    times = [s["t"] for s in kept]
    assert times == sorted(times)
    assert times[-1] == start + WEEK - 6  # the newest always
    assert times[0] - start < 2 * 3600  # the first hours are still there...
    assert times[-1] - times[-50] == 6 * 49  # ...and the last minutes at full resolution
    early_gap = times[1] - times[0]
    assert early_gap > 60  # old samples thinned with their age
    assert not list(tmp_path.glob("*.tmp"))


def test_compaction_keeps_gaps_of_at_least_age_over_detail() -> None:
    samples = [{"t": float(t)} for t in range(0, 100_000, 2)]
    now = 100_000.0
    kept = compacted(samples, now, detail=100)
    assert kept[-1] == samples[-1]
    for older, newer in itertools.pairwise(kept):
        assert newer["t"] - older["t"] >= (now - older["t"]) / 100
    assert len(kept) < len(samples) / 20


def test_a_line_being_written_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.jsonl"
    path.write_text('{"t": 1.0, "cpu_percent": 1}\n{"t": 2.0, "cpu_perc')
    assert [s["t"] for s in read_series(str(path))] == [1.0]


def test_thin_keeps_the_last_and_spreads_evenly() -> None:
    items = list(range(1000))
    picked = thin(items, 10)
    assert len(picked) == 10 and picked[-1] == 999 and picked == sorted(picked)
    assert thin(items[:5], 10) == items[:5]


# -- real process trees ------------------------------------------------------------------------
TREE = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import time; x = bytearray(100 * 1024 * 1024); x[::4096] = b'1' * len(x[::4096]); "
        "print('held', flush=True); time.sleep(600)"], stdout=sys.stdout)
    print(child.pid, flush=True)
    time.sleep(600)
    """
)


def test_a_tree_is_summed_and_a_vanishing_process_ends_its_part_without_error(tmp_path: Path) -> None:
    rank = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert rank.stdout is not None
        child_pid = int(rank.stdout.readline())
        assert rank.stdout.readline().strip() == "held"
        log = tmp_path / "rank-0.log"
        log.write_text("x\n")
        said: list[str] = []
        monitor = Monitor(str(tmp_path), 1.0, lambda: {"rank-0": rank.pid}, lambda r: str(log), said.append)
        monitor.tick()  # the first reading only starts the CPU clock
        monitor.tick()
        first = read_series(str(tmp_path / "rank-0.jsonl"))[-1]
        assert first["rss_bytes"] >= 100 * MB  # the child's memory counts for the rank
        assert first["threads"] >= 2 and first["out"] == pytest.approx(log.stat().st_mtime, abs=0.01)
        subprocess.run(["kill", "-9", str(child_pid)], check=True)
        time.sleep(0.2)
        monitor.tick()
        after = read_series(str(tmp_path / "rank-0.jsonl"))[-1]
        assert after["rss_bytes"] < 100 * MB
        rank.kill()
        rank.wait()
        monitor.tick()  # the rank itself is gone: its series ends, quietly
        assert len(read_series(str(tmp_path / "rank-0.jsonl"))) == 2
        # NVML: absent on this machine, said once; the samples have no GPU fields at all.
        assert "gpus" not in after and "gpu_mem_bytes" not in after
    finally:
        rank.kill()


# -- GPU: NVML's documented structures, and its absence ------------------------------------------
def test_gpu_fields_from_nvml_structures() -> None:
    pynvml = pytest.importorskip("pynvml")
    util = pynvml.c_nvmlUtilization_t(gpu=87, memory=40)
    memory = pynvml.c_nvmlMemory_t(total=80 * 2**30, free=60 * 2**30, used=20 * 2**30)
    assert sampler.gpu_entry(3, util, memory) == {
        "index": 3,
        "util_percent": 87.0,
        "mem_used_bytes": 20 * 2**30,
        "mem_total_bytes": 80 * 2**30,
    }
    # nvmlDeviceGetName's answer: str, or bytes from an older nvidia-ml-py.
    assert sampler.gpu_entry(3, util, memory, "NVIDIA H200")["name"] == "NVIDIA H200"
    assert sampler.gpu_entry(3, util, memory, b"NVIDIA H200")["name"] == "NVIDIA H200"
    # As nvmlDeviceGetComputeRunningProcesses returns them (usedGpuMemory None: not available).
    procs = []
    for pid, used in ((100, 5 * 2**30), (101, 2**30), (999, 7 * 2**30), (102, None)):
        raw = pynvml.c_nvmlProcessInfo_v3_t(pid=pid, usedGpuMemory=used or 0)
        proc = pynvml.nvmlStructToFriendlyObject(raw)
        if used is None:
            proc.usedGpuMemory = None
        procs.append(proc)
    assert sampler.tree_gpu_memory(procs, {100, 101, 102}) == 6 * 2**30


def test_rank_devices_follow_torchruns_convention() -> None:
    assert sampler.rank_devices({"LOCAL_RANK": "1"}) == ["1"]
    assert sampler.rank_devices({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "4,5"}) == ["5"]
    assert sampler.rank_devices({"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": ""}) == []
    assert sampler.rank_devices({"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "GPU-ab12"}) == ["GPU-ab12"]


def test_without_nvml_gpu_fields_are_absent_and_said_once() -> None:
    said: list[str] = []
    gpus = Gpus(said.append)
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # not installed, NVMLError_LibraryNotFound, DriverNotLoaded...
        pass
    else:
        pytest.skip("NVML works on this machine")
    assert gpus.sample(["0"], {1}) == (None, None)
    assert gpus.sample(["0"], {1}) == (None, None)
    assert len(said) == 1 and "NVML" in said[0]
    # ...and the payload leaves the fields out instead of sending null.
    sample = resources.to_sample({"t": 1.0, "cpu_percent": 5})
    assert "gpus" not in to_json(sample) and "gpu_mem_bytes" not in to_json(sample)
    with_gpu = resources.to_sample(
        {"t": 1.0, "gpus": [{"index": 0, "util_percent": 1, "mem_used_bytes": 2, "mem_total_bytes": 3}]}
        | {"gpu_mem_bytes": 2}
    )
    assert to_json(with_gpu)["gpus"][0]["mem_total_bytes"] == 3
    assert "name" not in to_json(with_gpu)["gpus"][0]  # a sample from before names were recorded
    named = {"index": 0, "util_percent": 1, "mem_used_bytes": 2, "mem_total_bytes": 3, "name": "NVIDIA H200"}
    assert to_json(resources.to_sample({"t": 1.0, "gpus": [named]}))["gpus"][0]["name"] == "NVIDIA H200"


# -- liveness ----------------------------------------------------------------------------------
def test_quiet_threshold_from_the_usual_output_interval() -> None:
    steady = [{"t": t, "out": float(t // 3 * 3)} for t in range(100)]  # output every 3 s
    assert usual_interval(steady) == 3
    assert quiet_after(1) == resources.QUIET_FLOOR  # 10 x 1 s is under the floor
    assert quiet_after(3) == 30
    assert quiet_after(None) == resources.QUIET_UNKNOWN
    assert usual_interval([{"t": 1, "out": 1.0}, {"t": 2, "out": 2.0}]) is None  # too little history


def test_quiet_replica_from_files(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "metrics").mkdir()
    now = time.time()
    log = tmp_path / "logs" / "rank-1.log"
    log.write_text("step\n")
    old = now - 100
    os.utime(log, (old, old))
    lines = [{"t": old - 30 + i, "cpu_percent": 1, "out": old - 30 + i} for i in range(30)]  # every 1 s
    (tmp_path / "metrics" / "rank-1.jsonl").write_text("".join(json.dumps(s) + "\n" for s in lines))
    (tmp_path / "metrics" / "monitor.json").write_text('{"interval": 1, "source": "sampler"}')
    runs = tmp_path / "runs" / "r1"
    runs.mkdir(parents=True)
    (runs / "metrics.jsonl").write_text("{}\n")  # rank 0's em metrics: rank 0 made progress now
    states = [ReplicaState("rank-0", False, now - 5), ReplicaState("rank-1", False, now - 200)]
    answer = read_resources(tmp_path, states)
    rank1 = answer.replicas["rank-1"]
    assert rank1.quiet and rank1.last_output == pytest.approx(old)
    assert not answer.replicas["rank-0"].quiet and answer.replicas["rank-0"].last_progress is not None
    ended = read_resources(tmp_path, [ReplicaState("rank-1", True, now - 200)])
    assert not ended.replicas["rank-1"].quiet  # an ended replica is never quiet
    assert quiet_replicas(tmp_path, states, SeriesTails()) == ["rank-1"]  # the job list says the same
    # started long ago and no output, but fresh em progress: not quiet in the list either
    assert quiet_replicas(tmp_path, [ReplicaState("rank-0", False, now - 200)], SeriesTails()) == []
    assert quiet_replicas(tmp_path, [ReplicaState("rank-1", True, now - 200)], SeriesTails()) == []


def test_the_list_reads_further_back_for_a_rank_that_rarely_prints(tmp_path: Path) -> None:
    """Outputs 10 min apart, 100 s ago: not quiet (its usual interval is long), though the series'
    last ``LIST_TAIL_BYTES`` hold a single output time, as the details also say."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "metrics").mkdir()
    now = time.time()
    last_out = now - 100
    outs = [last_out - 600 * k for k in range(4, -1, -1)]
    lines = [{"t": t, "cpu_percent": 1, "rss_bytes": 1 << 30, "out": max(o for o in outs if o <= t)}
             for t in (outs[0] + 0.5 * i for i in range(int((now - outs[0]) / 0.5)))]  # fmt: skip
    series = "".join(json.dumps(s) + "\n" for s in lines)
    assert len(series) > 4 * resources.LIST_TAIL_BYTES
    (tmp_path / "metrics" / "rank-0.jsonl").write_text(series)
    states = [ReplicaState("rank-0", False, outs[0])]
    assert not read_resources(tmp_path, states).replicas["rank-0"].quiet
    assert quiet_replicas(tmp_path, states, SeriesTails()) == []


@pytest.mark.parametrize("value", [-1, 0.05, 7200, float("nan"), True, "2"])
def test_a_bad_monitor_interval_is_refused_naming_it(value: object) -> None:
    from jupyter_disttrain.api import dryrun
    from jupyter_disttrain.jobs.intake import spec_from_words
    from jupyter_disttrain.model.errors import InvalidSpecError

    spec = spec_from_words(gpus=1, backend="local", accelerator="cpu", options={"monitor_interval": value})
    with pytest.raises(InvalidSpecError, match=r"monitor_interval must be 0 \(off\) or a number of seconds"):
        dryrun("print(1)\n", spec)


def test_monitor_interval_reaches_the_launch_request() -> None:
    from jupyter_disttrain.api import dryrun
    from jupyter_disttrain.jobs.intake import spec_from_words

    off = spec_from_words(gpus=1, backend="local", accelerator="cpu", options={"monitor_interval": 0})
    assert dryrun("print(1)\n", off).request.to_json()["monitor_interval"] == 0
    default = spec_from_words(gpus=1, backend="local", accelerator="cpu")
    assert dryrun("print(1)\n", default).request.to_json()["monitor_interval"] == 2.0


def test_series_tails_read_only_what_was_appended(tmp_path: Path) -> None:
    """A listing follows each series: appended lines extend its history, a line being written is
    read once whole, and a file compaction rewrote (a new inode) is read anew."""
    path = tmp_path / "rank-0.jsonl"
    path.write_text("".join(json.dumps({"t": i, "out": float(i)}) + "\n" for i in range(5)))
    tails = SeriesTails()
    assert tails.history(path).outs == [0.0, 1.0, 2.0, 3.0, 4.0]
    with path.open("a") as f:
        f.write(json.dumps({"t": 5, "out": 7.0}) + "\n" + '{"t": 6, "ou')  # the last one half written
    history = tails.history(path)
    assert history.outs[-1] == 7.0 and history.last_out == 7.0
    with path.open("a") as f:
        f.write('t": 9.0}\n')
    assert tails.history(path).last_out == 9.0
    assert tails.history(path).usual == History.of(read_series(str(path))).usual
    compacted_file = tmp_path / "new.jsonl"
    compacted_file.write_text(json.dumps({"t": 10, "out": 10.0}) + "\n")
    os.replace(compacted_file, path)
    assert tails.history(path).outs == [10.0]


def test_a_listing_says_which_jobs_wrote_tensorboard_data(tmp_path: Path) -> None:
    """The listing says where "Open TensorBoard" has something to show: event files (issue 28)."""
    from torch.utils.tensorboard import SummaryWriter

    from jupyter_disttrain.jobs.manager import JobManager
    from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus
    from jupyter_disttrain.storage.store import JobRecord, JobStore

    store = JobStore(tmp_path / "jobs")
    ids = {}
    for name in ("plain", "logged"):
        ids[name] = job_id = store.new_job_id(name)
        store.create(JobRecord(id=job_id, spec=JobSpec(name=name)), "print('hi')\n")
        store.write_status(JobStatus(job_id=job_id, phase=JobPhase.SUCCEEDED))
    (store.tensorboard_dir(ids["plain"]) / "notes.txt").write_text("no events here")
    with SummaryWriter(str(store.tensorboard_dir(ids["logged"]) / "run1")) as writer:
        writer.add_scalar("loss", 1.0, 0)
    manager = JobManager(store, "local")
    listed = {item.record.spec.name: item.summary["tensorboard"] for item in manager.list_jobs()}
    assert listed == {"plain": False, "logged": True}
    assert manager.detail(ids["logged"]).summary.tensorboard is True
    assert manager.detail(ids["plain"]).summary.tensorboard is False
