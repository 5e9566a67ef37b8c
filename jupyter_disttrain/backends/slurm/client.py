"""Slurm's client commands, run for the backend: argv only, bounded in time and bytes.

Each command runs with the caller's environment minus the variables that would change what
Slurm prints (``SQUEUE_FORMAT``, ``SLURM_TIME_FORMAT``...): ``SLURM_CONF`` and the rest still
find the cluster. Job states come from ``squeue -O`` (one call for many jobs, filtered by Slurm),
from ``squeue --json`` when the text cannot be read, and from ``sacct`` only for jobs squeue no
longer knows, where accounting exists.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ...model.errors import BackendError
from .parse import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    SlurmJob,
    SlurmOutputError,
    parse_sacct_text,
    parse_sbatch,
    parse_squeue_json,
    parse_squeue_text,
    parse_version,
)

COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "srun", "sinfo")
# Variables that reformat or refilter what the commands print (squeue, sacct, sinfo man pages).
_OUTPUT_ENV = ("SQUEUE_", "SACCT_", "SINFO_", "SLURM_TIME_FORMAT", "SCONTROL_")
MAX_OUTPUT = 32 << 20  # squeue --json on 22.05 lists every job of the cluster: bounded
TIMEOUT = 30.0
_UNKNOWN_JOB = "Invalid job id specified"
_CACHE_SECONDS = 1.0


class SlurmUnavailable(BackendError):
    """Slurm cannot be asked: its commands are missing, or its controller does not answer."""


class SlurmCommandError(BackendError):
    """A command answered with an error (its last line of stderr, which says what is wrong)."""


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: int
    gpus: bool  # some node of it has gres/gpu
    max_time: str  # as sinfo prints it: UNLIMITED, 1-00:00:00...
    default: bool
    up: bool


def missing_commands() -> str | None:
    """One line saying which Slurm commands are not on PATH, or None."""
    absent = [c for c in COMMANDS if shutil.which(c) is None]
    if not absent:
        return None
    return (
        f"{', '.join(absent)} not on PATH: the slurm backend needs Slurm's client commands "
        "(load your site's slurm module, or apt-get install slurm-client)"
    )


def slurm_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(_OUTPUT_ENV)}


def run(argv: list[str], timeout: float = TIMEOUT, max_bytes: int = MAX_OUTPUT) -> str:
    """``argv``'s stdout; ``SlurmCommandError`` with its stderr's last line when it fails,
    ``SlurmUnavailable`` when it is missing, hangs, or says the controller does not answer."""
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=slurm_env(),
        )
    except FileNotFoundError:
        raise SlurmUnavailable(missing_commands() or f"{argv[0]} not on PATH") from None
    out, err, over = _read_bounded(proc, timeout, max_bytes)
    if over:
        raise SlurmUnavailable(f"{argv[0]} {over}")
    text, problem = out.decode("utf-8", "replace"), err.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        line = problem.splitlines()[-1] if problem else f"exit status {proc.returncode}"
        if "contact slurm controller" in problem or "Unable to contact" in problem:
            raise SlurmUnavailable(f"Slurm's controller does not answer ({line})")
        if "configuration source" in problem:  # no slurm.conf, no SLURM_CONF, no DNS SRV record
            raise SlurmUnavailable(f"Slurm's commands find no cluster here ({line}): set SLURM_CONF")
        raise SlurmCommandError(line)
    return text


def _read_bounded(proc: subprocess.Popen[bytes], timeout: float, max_bytes: int) -> tuple[bytes, bytes, str]:
    """stdout and stderr of ``proc`` (killed past ``timeout`` or ``max_bytes``), and why if it was."""
    chunks: dict[str, list[bytes]] = {"out": [], "err": []}
    size = [0]

    def drain(name: str, stream: object, limit: int) -> None:
        while chunk := stream.read1(65536):  # type: ignore[attr-defined]
            size[0] += len(chunk)
            if sum(len(c) for c in chunks[name]) < limit:
                chunks[name].append(chunk)
            if size[0] > max_bytes:
                proc.kill()
                return

    threads = [
        threading.Thread(target=drain, args=("out", proc.stdout, max_bytes), daemon=True),
        threading.Thread(target=drain, args=("err", proc.stderr, 65536), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return b"", b"", f"did not answer within {timeout:.0f} s"
    for t in threads:
        t.join(5)
    if size[0] > max_bytes:
        return b"", b"", f"printed more than {max_bytes >> 20} MiB"
    return b"".join(chunks["out"]), b"".join(chunks["err"]), ""


class SlurmClient:
    """What the backend asks Slurm, with the answers that do not change cached."""

    def __init__(self) -> None:
        self._version: tuple[int, int, int] | None = None
        self._select: str | None = None
        self._json_only = False  # the text query failed once: this Slurm's squeue -O differs
        self._jobs: dict[str, tuple[float, SlurmJob | None]] = {}
        self._lock = threading.Lock()

    # -- the cluster ---------------------------------------------------------------------------
    def version(self) -> tuple[int, int, int]:
        if self._version is None:
            self._version = parse_version(run(["sbatch", "--version"]))
        return self._version

    def gres_for_gpus(self) -> bool:
        """Whether GPUs are asked for with ``--gres=gpu:N``: select/cons_tres (and Slurm 19.05+)
        takes ``--gpus-per-node``, other selectors only the older gres form."""
        if self._select is None:
            config = run(["scontrol", "show", "config"])
            line = next((ln for ln in config.splitlines() if ln.startswith("SelectType ")), "")
            self._select = line.partition("=")[2].strip()
        return "cons_tres" not in self._select or self.version()[:2] < (19, 5)

    def allocation_gpus(self, job: str) -> int:
        """The GPUs allocation ``job`` holds (its TRES ``gres/gpu=N``; 0 without)."""
        m = re.search(r"gres/gpu(?::[^=,\s]+)?=(\d+)", run(["scontrol", "show", "job", job]))
        return int(m.group(1)) if m else 0

    def partitions(self) -> dict[str, Partition]:
        text = run(["sinfo", "--noheader", "--format=%P|%D|%G|%l|%a"])
        found: dict[str, Partition] = {}
        for line in text.splitlines():
            cells = line.split("|")
            if len(cells) < 5 or not cells[1].strip().isdigit():
                continue
            name = cells[0].strip()
            default, name = name.endswith("*"), name.rstrip("*")
            old = found.get(name)
            found[name] = Partition(
                name=name,
                nodes=int(cells[1]) + (old.nodes if old else 0),
                gpus="gpu" in cells[2] or bool(old and old.gpus),
                max_time=cells[3].strip(),
                default=default,
                up=cells[4].strip() == "up",
            )
        return found

    # -- jobs ----------------------------------------------------------------------------------
    def submit(self, argv: list[str]) -> str:
        return parse_sbatch(run(argv, timeout=60))

    def jobs(self, ids: Iterable[str], fresh: bool = False) -> dict[str, SlurmJob]:
        """What Slurm knows of ``ids`` now (a job it forgot is left out), from one query; an
        answer of the last second is reused unless ``fresh``."""
        ids = sorted(set(ids))
        now = time.monotonic()
        with self._lock:
            cached = {i: self._jobs[i] for i in ids if i in self._jobs}
        if (
            not fresh
            and ids
            and all(now - t < _CACHE_SECONDS for t, _ in cached.values())
            and len(cached) == len(ids)
        ):
            return {i: job for i, (_, job) in cached.items() if job is not None}
        found = self._query(ids) if ids else {}
        with self._lock:
            for i in ids:
                self._jobs[i] = (now, found.get(i))
            if len(self._jobs) > 4096:
                self._jobs = {i: v for i, v in self._jobs.items() if now - v[0] < _CACHE_SECONDS}
        return found

    def _query(self, ids: list[str]) -> dict[str, SlurmJob]:
        if not self._json_only:
            try:
                return self._text(ids)
            except (SlurmOutputError, SlurmCommandError):
                self._json_only = True  # say the same thing in the one layout left
        try:
            return parse_squeue_json(run(["squeue", "--json", f"--jobs={','.join(ids)}"]), set(ids))
        except SlurmCommandError as exc:
            if _UNKNOWN_JOB in str(exc):
                return {}
            raise
        except SlurmOutputError as exc:
            raise SlurmUnavailable(f"squeue answered in a layout this backend cannot read: {exc}") from None

    def _text(self, ids: list[str]) -> dict[str, SlurmJob]:
        argv = ["squeue", "--noheader", "--states=all", f"--jobs={','.join(ids)}", "-O", SQUEUE_FORMAT]
        try:
            return parse_squeue_text(run(argv))
        except SlurmCommandError as exc:
            if _UNKNOWN_JOB in str(exc):  # every id unknown (one known one makes it answer)
                return {}
            raise

    def accounting(self, ids: Iterable[str]) -> dict[str, SlurmJob]:
        """What accounting (``sacct``) recorded of ``ids``; nothing where there is none."""
        if shutil.which("sacct") is None:
            return {}
        argv = [
            "sacct",
            "--noheader",
            "--parsable2",
            f"--jobs={','.join(ids)}",
            f"--format={','.join(SACCT_FIELDS)}",
        ]
        try:
            return parse_sacct_text(run(argv, timeout=10))
        except (SlurmCommandError, SlurmUnavailable):  # "accounting storage is disabled"
            return {}

    def cancel(self, target: str, signal: str | None = None, batch: bool = False) -> None:
        """``scancel`` a job or a step (``JOB.STEP``); with ``signal``, send it instead of ending
        the job (``batch``: to the batch script alone). A job that already ended is no error."""
        argv = ["scancel"]
        if signal:
            argv.append(f"--signal={signal}")
        if batch:
            argv.append("--batch")
        try:
            run([*argv, target], timeout=15)
        except SlurmCommandError as exc:
            if (
                "already completing" not in str(exc)
                and _UNKNOWN_JOB not in str(exc)
                and "Invalid job" not in str(exc)
            ):
                raise

    def steps(self, job: str) -> dict[str, str]:
        """The running steps of ``job``: step id (``123.4``) to step name."""
        try:
            text = run(["squeue", "--steps", "--noheader", f"--jobs={job}", "--format=%i|%j"])
        except SlurmCommandError:
            return {}
        steps = {}
        for line in text.splitlines():
            step, _, name = line.strip().partition("|")
            if step and "." in step:
                steps[step] = name
        return steps
