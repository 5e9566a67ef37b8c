"""Slurm batch jobs kept warm (``--keep-warm DURATION`` outside an allocation): the batch job stays
after its job, its launcher waiting on the keeper of its warm steps (``keeper.py``, started in the
batch step as inside an allocation), and a re-run of the same shape runs in it with no ``sbatch``.

- The first job's launcher, once its job ended, records the kept job in its job dir
  (``slurm/kept.json``: the Slurm job, its shape, the idle time) and waits until the keeper ends
  (idle past the duration, released, or the job's end); then the batch job ends.
- A re-run is found a kept job with ``squeue`` (this user's running jobs, each named for the job
  id of its first job, whose ``kept.json`` says its shape): same shape, and its launcher runs as
  one ``srun --jobid=KEPT --overlap`` step on the kept job's first node, which forks from the warm
  step there as a re-run inside an allocation does (``mode`` ``KEPT``). Another shape says which
  field differs, and the job is a new batch job.
- A kept job is a pool (``pools``): the jobs running in it are its steps' names; a release is
  ``scancel`` of the kept job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...model.errors import BackendError, InvalidSpecError, PoolBusyError, UnknownJobError
from ...model.specs import JobSpec
from ...payloads.pools import Pool, PoolNode, ReleaseAnswer
from ...storage import procs
from ...storage.logfiles import last_line
from ...storage.store import JobStore, write_record
from ..agents.supervisor import LAUNCHER_FILE
from . import pools as warm_pools
from .client import SlurmClient, SlurmCommandError, SlurmUnavailable, run
from .options import SlurmOptions
from .pools import RELEASE_WAIT
from .request import SlurmRequest
from .script import LAUNCH_MODULE, OVERLAP_SINCE, SLURM_DIR, Place
from .status import read_dict

KEPT_FILE = "kept.json"  # in the first job's slurm dir, while its batch job is kept
RELAY_FILE = "relay.json"  # a re-run's: the srun beside the kernel that runs its launcher step
POOL_PREFIX = "slurm-kept-"
MARKS_DIR = ".slurm-kept"  # in the job root: the batch jobs submitted with --keep-warm (``mark``)
# The steps of a kept job that run no job of ours.
_OWN_STEPS = {"batch", "extern", "disttrain-warm"}


def shape(spec: JobSpec, opts: SlurmOptions, place: Place, fingerprint: str) -> dict[str, Any]:
    """What a re-run must share with a kept batch job to run in it (``--time`` not: a re-run gets
    what is left of the kept job's)."""
    return {
        "partition": opts.partition,
        "account": opts.account,
        "qos": opts.qos,
        "reservation": opts.reservation,
        "constraint": opts.constraint,
        "mem": opts.mem,
        "exclusive": opts.exclusive,
        "cpus_per_gpu": opts.cpus_per_gpu,
        "sbatch_options": list(opts.sbatch_options),
        "nodes": spec.nodes,
        "nproc_per_node": spec.nproc_per_node,
        "gpu": place.gpu,
        "fingerprint": fingerprint,
    }


@dataclass(frozen=True)
class Found:
    """The kept job a re-run runs in (``slurm_job``), or why none (``why``: "" when none is kept)."""

    slurm_job: str | None
    why: str = ""


def _running(client: SlurmClient) -> list[tuple[str, str]]:
    """This user's running jobs as (Slurm id, name)."""
    text = run(["squeue", "--me", "--noheader", "--states=RUNNING", "--format=%i|%j"])
    found = []
    for line in text.splitlines():
        slurm_job, _, name = line.strip().partition("|")
        if slurm_job.isdigit() and name:
            found.append((slurm_job, name))
    return found


def mark(store: JobStore, job_id: str) -> None:
    """Note a batch job submitted with ``--keep-warm`` in the job root, so that listings ask
    ``squeue`` only while such a job may be kept (the sidebar polls the pools)."""
    marks = store.root / MARKS_DIR
    marks.mkdir(exist_ok=True)
    (marks / job_id).touch()


def kept_jobs(client: SlurmClient, store: JobStore) -> list[tuple[str, str, dict[str, Any]]]:
    """The kept batch jobs of this store as (Slurm id, first job id, its ``kept.json``); a job
    marked (``mark``) that Slurm no longer runs and that has ended is unmarked."""
    try:
        marked = {p.name for p in (store.root / MARKS_DIR).iterdir()}
    except OSError:
        return []
    if not marked:
        return []
    try:
        running = [(slurm_job, name) for slurm_job, name in _running(client) if name in marked]
    except (SlurmUnavailable, SlurmCommandError):
        return []
    kept = []
    for slurm_job, name in running:
        with contextlib.suppress(InvalidSpecError):  # not a job id: no job of ours
            record = read_dict(store.job_dir(name) / SLURM_DIR / KEPT_FILE)
            if record and str(record.get("slurm_job")) == slurm_job and isinstance(record.get("shape"), dict):
                kept.append((slurm_job, name, record))
    for name in marked - {name for _, name in running}:
        with contextlib.suppress(InvalidSpecError, UnknownJobError, OSError, ValueError):
            status = store.read_status(name)
            if status is None or status.is_terminal:
                (store.root / MARKS_DIR / name).unlink()
    return kept


def find(client: SlurmClient, store: JobStore, wanted: dict[str, Any]) -> Found:
    """The first kept job of ``wanted``'s shape, else why the first kept job does not fit."""
    why = ""
    for slurm_job, _, record in kept_jobs(client, store):
        have = record["shape"]
        differs = [key for key in wanted if have.get(key) != wanted[key]]
        if not differs:
            return Found(slurm_job)
        if not why:
            key = differs[0]
            why = (
                f"kept Slurm job {slurm_job} has {key} {_word(have.get(key))}, this job {_word(wanted[key])}"
            )
    return Found(None, why)


def _word(value: object) -> str:
    return "none" if value in (None, [], "") else json.dumps(value) if isinstance(value, list) else str(value)


# -- the kept batch job's side ---------------------------------------------------------------------
def keep(job_dir: Path, request: SlurmRequest, socket: Path) -> None:
    """Once the first job ended: record the batch job as kept while the keeper of its warm steps
    (``socket``'s) lives (it ends when idle past the duration, on release, or with the job)."""
    lock_path = socket.with_suffix(".lock")
    slurm_job = os.environ.get("SLURM_JOB_ID", "")
    if not slurm_job or not lock_path.exists():
        return
    kept = job_dir / SLURM_DIR / KEPT_FILE
    keep_for = float(request.keep.get("idle") or 0)
    write_record(kept, {"slurm_job": slurm_job, "shape": request.keep.get("shape"), "since": time.time()})
    print(
        f"kept: Slurm job {slurm_job} waits for re-runs of this shape (idle for {keep_for:g} s)", flush=True
    )
    # Slurm ending the job (scancel, its time limit) ends this waiting process at once.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        kept.unlink(missing_ok=True)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # the keeper holds it (exclusively) while it lives
    finally:
        os.close(fd)
        kept.unlink(missing_ok=True)
    print(f"kept: Slurm job {slurm_job} ends (its warm steps have ended)", flush=True)


def ended_while_kept(job_dir: Path) -> bool:
    """Whether Slurm requeued a kept batch job whose own job had ended (it is not run again)."""
    kept = job_dir / SLURM_DIR / KEPT_FILE
    if not kept.exists():
        return False
    kept.unlink(missing_ok=True)
    return True


# -- a re-run's side ---------------------------------------------------------------------------------
def relay_argv(job_id: str, job_dir: str, python: str, place: Place) -> list[str]:
    """The re-run's launcher, one task on the kept job's first node (where its keeper listens)."""
    argv = [
        "srun",
        f"--jobid={place.allocation}",
        f"--job-name={job_id}",
        "--nodes=1",
        "--ntasks=1",
        "--relative=0",
    ]
    if place.version[:2] >= OVERLAP_SINCE:
        argv.append("--overlap")
    return [*argv, "--unbuffered", python, "-u", "-m", LAUNCH_MODULE, job_dir]


def start_relay(job_dir: Path, argv: list[str], timeout: float) -> bool:
    """Start the re-run's launcher step (``srun`` beside the kernel, a session of its own); True
    once the launcher recorded itself, False when the step could not start (the kept job ended
    meanwhile: the job is then submitted as a new batch job)."""
    with open(job_dir / "launcher.log", "ab") as log:
        proc = subprocess.Popen(
            argv,
            cwd=job_dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    write_record(job_dir / SLURM_DIR / RELAY_FILE, procs.process_identity(proc.pid))
    deadline = time.monotonic() + timeout
    while not (job_dir / LAUNCHER_FILE).exists():
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            proc.kill()
            detail = last_line(job_dir / "launcher.log") or "no output"
            raise BackendError(f"the job's launcher step did not start within {timeout:.0f} s: {detail}")
        time.sleep(0.01)
    return True


def relay_alive(job_dir: Path) -> bool | None:
    """Whether a re-run's launcher step (its ``srun`` beside the kernel) still runs."""
    relay = read_dict(job_dir / SLURM_DIR / RELAY_FILE)
    return None if relay is None else procs.is_alive(relay)


# -- pools ---------------------------------------------------------------------------------------------
def pools(client: SlurmClient, store: JobStore) -> list[Pool]:
    """A pool per kept batch job: its jobs are the steps running a job of ours. Where this machine
    sees its keeper (its first node is this machine), the keeper's own account of its warm steps
    (hosts, GPUs, idle since when); else what Slurm and ``kept.json`` say (idle time unknown)."""
    found = []
    local = {
        named["allocation"]: path
        for path in warm_pools.keepers()
        if (named := warm_pools.SOCKET_NAME.fullmatch(path.name))
    }
    for slurm_job, name, record in kept_jobs(client, store):
        jobs = sorted({n for n in client.steps(slurm_job).values() if n not in _OWN_STEPS})
        place = f"kept batch job {slurm_job} (of job {name})"
        answer = warm_pools.status(local[slurm_job]) if slurm_job in local else None
        if answer and answer["steps"]:
            pool = warm_pools.pool_of(local[slurm_job], answer["steps"], time.time())
            found.append(dataclasses.replace(pool, id=f"{POOL_PREFIX}{slurm_job}", place=place, jobs=jobs))
            continue
        shape_of = record["shape"]
        gpus = int(shape_of.get("nproc_per_node") or 0) if shape_of.get("gpu") else 0
        nodes = [
            PoolNode(node=n, host="?", step=f"{slurm_job} (batch job)", accelerators=[], jobs=[])
            for n in range(int(shape_of.get("nodes") or 1))
        ]
        nodes[0].jobs = jobs
        found.append(
            Pool(
                id=f"{POOL_PREFIX}{slurm_job}",
                backend="slurm",
                place=place,
                fingerprint=str(shape_of.get("fingerprint") or ""),
                nodes=nodes,
                accelerators=gpus * len(nodes),
                jobs=jobs,
                idle_for=None,
                releases_in=None,
            )
        )
    return found


def release(client: SlurmClient, pool: Pool, force: bool) -> ReleaseAnswer:
    """``scancel`` of the kept job; refused while it runs a job, unless ``force`` (the job fails)."""
    slurm_job = pool.id.removeprefix(POOL_PREFIX)
    busy = sorted({n for n in client.steps(slurm_job).values() if n not in _OWN_STEPS})
    if busy and not force:
        raise PoolBusyError(
            f"pool {pool.id} runs job {', '.join(busy)}: cancel it first, or release the pool by force "
            "(--force; REST: ?force=true), which fails the job"
        )
    with contextlib.suppress(SlurmCommandError):
        client.cancel(slurm_job)
    deadline = time.monotonic() + RELEASE_WAIT
    while time.monotonic() < deadline:
        with contextlib.suppress(SlurmUnavailable, SlurmCommandError):
            if slurm_job not in dict(_running(client)):
                return ReleaseAnswer(pool.id, True, f"released: Slurm job {slurm_job} has ended (scancel)")
        time.sleep(0.2)
    return ReleaseAnswer(pool.id, False, f"releasing: Slurm job {slurm_job} is still ending (scancel)")
