"""``jupyter disttrain`` from a terminal, as its own process."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = """
import os, sys
print("rank", os.environ["RANK"], "args", sys.argv[1:], flush=True)
"""


def _cli(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.cli", "--root", str(root), *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=300,
    )


def test_run_list_status_logs_delete(tmp_path: Path) -> None:
    script = tmp_path / "my_train.py"
    script.write_text(SCRIPT)
    root = tmp_path / "jobs"
    run = _cli(root, "run", str(script), "--gpus", "2", "--", "--epochs", "1")
    assert "[rank0] rank 0 args ['--epochs', '1']" in run.stdout
    assert "[rank1] rank 1 args ['--epochs', '1']" in run.stdout
    assert "Succeeded" in run.stdout
    listing = _cli(root, "list").stdout
    job_id = listing.splitlines()[1].split()[0]
    assert job_id.startswith("my-train-") and "Succeeded" in listing
    assert "rank-1" in _cli(root, "status", job_id).stdout
    assert _cli(root, "logs", job_id, "--replica", "rank-0").stdout == "rank 0 args ['--epochs', '1']\n"
    assert "files kept" in _cli(root, "delete", job_id).stdout
    assert job_id not in _cli(root, "list").stdout
    assert _cli(root, "logs", job_id, "--replica", "rank-1").stdout.startswith("rank 1")  # still readable


def test_the_default_name_is_made_of_any_script_file_name(tmp_path: Path) -> None:
    script = tmp_path / "My_Train v2.py"
    script.write_text(SCRIPT)
    shown = _cli(tmp_path / "jobs", "run", str(script), "--dry-run").stdout
    assert "(local backend, job my-train-v2-" in shown, shown


def test_errors_are_one_line_with_exit_code_1(tmp_path: Path) -> None:
    bad = _cli(tmp_path / "jobs", "status", "../etc", check=False)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "is not a job id" in bad.stderr


def test_cancel_orphans_stops_a_job_whose_directory_was_removed(tmp_path: Path) -> None:
    from jupyter_disttrain import api
    from jupyter_disttrain.storage import procs
    from jupyter_disttrain.storage.store import JobStore

    root = tmp_path / "jobs"
    job = api.submit("import time\nprint('up', flush=True)\ntime.sleep(600)\n", store=JobStore(root), gpus=2)
    while job.status().replicas_ready < 2:
        assert not job.status().is_terminal
    shutil.rmtree(job.dir)  # by hand, while it runs: no record names its processes any more
    assert len(procs.orphans()[str(job.dir)]) >= 4  # launcher, agent, two ranks
    assert "no job" in _cli(root, "cancel", job.id, check=False).stderr
    done = _cli(root, "cancel", "--orphans")
    # Orphans are swept machine-wide (no record names them): another run's may be listed too.
    assert any(line.startswith(f"{job.dir}: stopped ") for line in done.stdout.splitlines()), done.stdout
    assert procs.wait_gone(job.id, timeout=30) and str(job.dir) not in procs.orphans()
    assert str(job.dir) not in _cli(root, "cancel", "--orphans").stdout
    assert "give a job id, or --orphans alone" in _cli(root, "cancel", check=False).stderr


@pytest.mark.parametrize("module", ["backends.local.launch", "backends.local_launch"])
def test_orphans_include_launchers_of_this_and_earlier_versions(tmp_path: Path, module: str) -> None:
    # Jobs started before the local backend became a package run ``-m ...backends.local_launch``:
    # an upgrade must still find them (a stand-in process with each command line).
    from jupyter_disttrain.storage import procs

    gone = tmp_path / "gone-job"
    argv = ["-c", "import time; time.sleep(120)", "-m", f"jupyter_disttrain.{module}", str(gone)]
    proc = subprocess.Popen([sys.executable, *argv])
    try:
        deadline = time.monotonic() + 30
        while str(gone) not in procs.orphans():
            assert time.monotonic() < deadline, "the earlier version's launcher was not found"
            time.sleep(0.1)
        assert [p.pid for p in procs.orphans()[str(gone)]] == [proc.pid]
    finally:
        proc.kill()
        proc.wait()


STUCK = """
import os, time
def stuck_here():
    time.sleep(600)
print("stuck", flush=True)
stuck_here()
"""


def test_stack_names_the_function_each_rank_is_stuck_in(tmp_path: Path) -> None:
    from jupyter_disttrain import api
    from jupyter_disttrain.storage.store import JobStore

    root = tmp_path / "jobs"
    job = api.submit(STUCK, store=JobStore(root), gpus=2, name="stuck", accelerator="cpu")
    try:
        logs = job.dir / "logs"
        deadline = time.monotonic() + 180
        while not all(
            (logs / f"rank-{r}.log").is_file() and "stuck" in (logs / f"rank-{r}.log").read_text()
            for r in (0, 1)
        ):
            assert time.monotonic() < deadline and not job.status().is_terminal
            time.sleep(0.2)
        one = _cli(root, "stack", job.id, "--replica", "rank-1", "--method", "faulthandler").stdout
        assert one.startswith("==== rank-1 (faulthandler) ====") and "stuck_here" in one
        both = _cli(root, "stack", job.id).stdout
        assert "==== rank-0 (" in both and "==== rank-1 (" in both and both.count("stuck_here") >= 2
        unknown = _cli(root, "stack", job.id, "--replica", "rank-5", check=False)
        assert unknown.returncode == 1 and "no replica 'rank-5'" in unknown.stderr
    finally:
        job.cancel()
    ended = _cli(root, "stack", job.id, "--replica", "rank-0", check=False)
    assert ended.returncode == 1 and "has ended (Cancelled)" in ended.stderr
