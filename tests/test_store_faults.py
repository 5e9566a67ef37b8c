"""The store against odd directories, links, bad names and a full disk (issue 9: 4, 5, 9, 10, 14)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.local import backend as backend_module
from jupyter_disttrain.backends.local.backend import LocalBackend
from jupyter_disttrain.backends.local.devices import cpu_count
from jupyter_disttrain.commands import run_subcommand
from jupyter_disttrain.model.errors import DistTrainError, InvalidSpecError, UnknownJobError
from jupyter_disttrain.model.specs import RESERVED_ENV, JobPhase, JobSpec, JobStatus
from jupyter_disttrain.storage.store import JobRecord, JobStore


def finished_job(store: JobStore, name: str = "done", log: bytes = b"hello\n") -> str:
    """A job that ran and ended, as the store keeps it (record, status, a rank's log)."""
    job_id = store.new_job_id(name)
    store.create(JobRecord(id=job_id, spec=JobSpec(name=name)), "print('hi')\n")
    store.write_status(JobStatus(job_id=job_id, phase=JobPhase.SUCCEEDED))
    (store.logs_dir(job_id) / "rank-0.log").write_bytes(log)
    return job_id


# -- 10: one odd directory never takes down the list ---------------------------------------------
def test_a_renamed_or_foreign_dir_is_skipped_and_ids_stay_unique(
    store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = finished_job(store)
    shutil.copytree(store.job_dir(job_id), store.root / "copied-abcde")  # job.json still says job_id
    (store.root / "Not A Job").mkdir()
    (store.root / "stray-file").write_text("x")
    assert [r.id for r in store.records()] == [job_id]
    assert [s.job_id for s in api.list_jobs(store)] == [job_id]
    with pytest.raises(UnknownJobError, match=r"copied-abcde.*renamed, copied or moved"):
        store.read_record("copied-abcde")
    assert "copied-abcde" in caplog.text
    lines: list[str] = []
    assert run_subcommand(["--root", str(store.root), "list"], lines.append) == 0
    assert lines[0].count(job_id) == 1 and "copied" not in lines[0]


# -- 4: links are never followed out of a job ----------------------------------------------------
def test_links_in_a_job_dir_are_not_followed(store: JobStore, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    job_id = finished_job(store)
    (store.logs_dir(job_id) / "x.log").symlink_to(secret)
    (store.job_dir(job_id) / "train.py").unlink()
    (store.job_dir(job_id) / "train.py").symlink_to(secret)
    texts = [line.text for line in LocalBackend(store).logs(job_id)]
    assert texts == ["hello"]
    with pytest.raises(UnknownJobError, match="symbolic link"):
        store.read_script(job_id)
    # A linked logs dir is no better.
    shutil.rmtree(store.logs_dir(job_id))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "rank-0.log").write_text("TOP SECRET\n")
    store.logs_dir(job_id).symlink_to(tmp_path / "elsewhere")
    assert list(LocalBackend(store).logs(job_id)) == []


def test_a_linked_job_dir_is_foreign_and_delete_never_touches_its_target(
    store: JobStore, tmp_path: Path
) -> None:
    other = JobStore(tmp_path / "other-root")
    victim = finished_job(other, "victim")
    (store.root).mkdir(parents=True, exist_ok=True)
    (store.root / victim).symlink_to(other.job_dir(victim))
    before = sorted(p.name for p in other.job_dir(victim).iterdir())
    assert store.records() == [] and api.list_jobs(store) == []
    backend = LocalBackend(store)
    for purge in (False, True):
        with pytest.raises(UnknownJobError, match="symbolic link"):
            backend.delete(victim, purge=purge)
    with pytest.raises(UnknownJobError):
        store.purge(victim)
    assert sorted(p.name for p in other.job_dir(victim).iterdir()) == before  # no 'deleted' marker


# -- 9: entrypoints never name the store's files; a failed submit leaves nothing -----------------
@pytest.mark.parametrize(
    "entrypoint",
    [
        "job.json",
        "status.json",
        "deleted",
        "logs",
        "logs/rank-0.log",
        "../x.py",
        "a/b.py",
        "a\\b.py",
        ".x.py",
        "",
        "x.py/",
    ],
)
def test_an_entrypoint_can_never_name_a_store_file(entrypoint: str) -> None:
    with pytest.raises(InvalidSpecError, match="entrypoint"):
        JobSpec(entrypoint=entrypoint).validate()


def test_plain_entrypoints_are_fine() -> None:
    for entrypoint in ("train.py", "my_train-2.v1.py"):
        JobSpec(entrypoint=entrypoint).validate()


def test_a_submit_that_fills_the_disk_removes_what_it_made(tmp_path: Path) -> None:
    # RLIMIT_FSIZE makes every write past 64 KiB fail with EFBIG, as a full disk fails with
    # ENOSPC: the job dir is half written when the error comes.
    root = tmp_path / "jobs"
    code = textwrap.dedent(
        f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        from jupyter_disttrain import api
        from jupyter_disttrain.model.errors import DistTrainError
        from jupyter_disttrain.storage.store import JobStore
        try:
            api.submit("x = 1\\n", store=JobStore({str(root)!r}), accelerator="cpu",
                       files={{"captured_big.npy": b"0" * (1 << 20)}})
        except DistTrainError as exc:
            print("refused:", exc)
            sys.exit(3)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "could not write the job directory" in proc.stdout and "nothing was launched" in proc.stdout
    assert os.listdir(root) == []  # no hidden half-made job dir


def test_reading_a_lost_launchers_job_never_writes(store: JobStore) -> None:
    job_id = store.new_job_id("lost")
    store.create(JobRecord(id=job_id, spec=JobSpec(name="lost")), "print(1)\n")
    store.write_status(JobStatus(job_id=job_id, phase=JobPhase.RUNNING))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (store.job_dir(job_id) / "launcher.json").write_text(json.dumps({"pid": dead.pid, "start_time": 1.0}))
    path = store.job_dir(job_id) / "status.json"
    before = path.stat()
    backend = LocalBackend(store)
    status = backend.describe(job_id)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "LauncherLost")
    list(backend.logs(job_id))
    backend.list()
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


# A submit killed where a server killed mid-submit stops: job.json and the Pending status are
# written, the launcher is not started yet.
KILLED_BEFORE_LAUNCH = """
import os, signal, sys
from jupyter_disttrain import api
from jupyter_disttrain.backends.local import backend
from jupyter_disttrain.storage.store import JobStore

backend.spawn_launcher = lambda *_: os.kill(os.getpid(), signal.SIGKILL)
api.submit("print(1)\\n", store=JobStore(sys.argv[1]), name="cut", accelerator="cpu")
"""


def test_a_submit_killed_before_its_launcher_started_reads_never_launched(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34, item 6: such a job read Pending forever. Past the time a launch may take, with
    no process of the job left, it is Failed (NeverLaunched); reading it writes nothing."""
    env = {**os.environ, "DISTTRAIN_WARM": "0"}  # no zygote to start
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_LAUNCH, str(store.root)], env=env, timeout=120
    )
    assert killed.returncode == -9
    (record,) = store.records()
    backend = LocalBackend(store)
    assert backend.describe(record.id).phase is JobPhase.PENDING  # as a launch in progress reads
    monkeypatch.setattr(backend_module, "NEVER_LAUNCHED_AFTER", 0.0)  # instead of waiting minutes
    # A process of the job (a launcher late to record itself would be one) keeps it Pending.
    env = {**os.environ, "DISTTRAIN_JOB_ID": record.id}
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env) as alive:
        try:
            assert backend.describe(record.id).phase is JobPhase.PENDING
        finally:
            alive.kill()
    path = store.job_dir(record.id) / "status.json"
    before = path.stat()
    status = backend.describe(record.id)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "NeverLaunched"), status
    assert (status.message or "").startswith(
        "the job was never launched"
    ) and "submit it again" in status.message
    assert [(r.phase, r.reason) for r in status.replicas] == [(JobPhase.FAILED, "NeverLaunched")]
    assert [s.reason for s in backend.list()] == ["NeverLaunched"]
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


# -- 5: --env cannot overwrite the product's own variables ---------------------------------------
@pytest.mark.parametrize("key", [*sorted(RESERVED_ENV), "DISTTRAIN_JOB_ID", "TORCHELASTIC_RESTART_COUNT"])
def test_reserved_env_names_are_refused(key: str) -> None:
    with pytest.raises(InvalidSpecError, match=f"env '{key}' is set by torchrun or jupyter_disttrain"):
        JobSpec(env={key: "1"}).validate()


def test_user_pythonpath_is_prepended_and_cuda_visible_devices_is_kept(
    store: JobStore, tmp_path: Path
) -> None:
    script = (
        "import os, sys\nprint(os.environ['PYTHONPATH'], '|', repr(os.environ['CUDA_VISIBLE_DEVICES']))\n"
    )
    job = api.submit(
        script,
        store=store,
        accelerator="cpu",
        working_dir=str(tmp_path),
        env={"PYTHONPATH": "/opt/mine", "CUDA_VISIBLE_DEVICES": "3"},
    )
    assert job.wait(timeout=120).phase is JobPhase.SUCCEEDED
    (line,) = [ln.text for ln in job.logs("rank-0")]
    path, devices = line.split(" | ")
    assert path.split(os.pathsep)[:2] == ["/opt/mine", str(tmp_path)]
    assert devices == "'3'"


# -- 14: more processes than the machine has CPUs ------------------------------------------------
def test_more_processes_than_cpus_is_refused_unless_oversubscribed(store: JobStore) -> None:
    many = cpu_count() + 1
    spec = JobSpec(name="big", nproc_per_node=many, accelerator="cpu")
    with pytest.raises(
        InvalidSpecError, match=f"--gpus {many} --nodes 1 starts {many} processes and this machine has "
    ) as err:
        LocalBackend(store).dryrun(spec)
    assert "pass --oversubscribe" in str(err.value)
    spec.options["oversubscribe"] = True
    LocalBackend(store).dryrun(spec)
    fits = JobSpec(name="fits", nproc_per_node=cpu_count(), accelerator="cpu")
    LocalBackend(store).dryrun(fits)


def test_the_cli_refuses_and_accepts_oversubscribe(store: JobStore, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('x')\n")
    many = str(cpu_count() + 1)
    with pytest.raises(DistTrainError, match="pass --oversubscribe"):
        run_subcommand(["--root", str(store.root), "run", str(script), "--gpus", many, "--detach"])
    assert store.ids() == []
    out: list[str] = []
    assert (
        run_subcommand(
            ["--root", str(store.root), "run", str(script), "--gpus", many, "--oversubscribe", "--detach"],
            out.append,
        )
        == 0
    )
    (job_id,) = store.ids()
    assert store.read_record(job_id).spec.options == {"oversubscribe": True}
    assert api.get_job(job_id, store).wait(timeout=120).phase is JobPhase.SUCCEEDED
