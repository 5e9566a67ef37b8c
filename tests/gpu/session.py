"""The check's world and what its checks share: a private directory (the notebook's working dir,
the job root, the warm zygote's runtime dir, Jupyter's dirs), one kernel that ran
``%load_ext jupyter_disttrain``, and the ways the checks reach the product: ``%%distrun`` cells in
that kernel, the job layer (``jupyter_disttrain.api``: what the REST API and the CLI answer with),
and raw ``torchrun`` on a job's own script for comparison.

Checks register with ``@check``: one function each, run in the order they are defined.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_disttrain import api
from jupyter_disttrain.backends.local.torchrun import RDZV_BACKEND
from jupyter_disttrain.backends.warm import plan as warm
from jupyter_disttrain.model.specs import JobPhase, JobStatus
from jupyter_disttrain.storage.procs import job_processes, stop_processes
from jupyter_disttrain.storage.store import JobRecord, JobStore

from .kernel import CellRun, Kernel, write_kernelspec
from .report import Check, Log

REPO = Path(__file__).resolve().parents[2]
MARK = "GC "  # a rank's lines for the check: "GC {json}"
# The notebook's first cell: what the %%distrun cells use from earlier cells (packaged with them).
NOTEBOOK = """import os, json, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def gc_device():
    \"\"\"This rank's device: its GPU (made the current one) where it has one, else the CPU.\"\"\"
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")
"""


@dataclass(frozen=True)
class Definition:
    """A registered check: its name in the report, what it proves, and the function."""

    name: str
    title: str
    run: Callable[[Session, Check], None]


CHECKS: list[Definition] = []


def check(
    name: str, title: str
) -> Callable[[Callable[[Session, Check], None]], Callable[[Session, Check], None]]:
    """Register a check function; later features add theirs the same way (one function each)."""

    def register(fn: Callable[[Session, Check], None]) -> Callable[[Session, Check], None]:
        if any(d.name == name for d in CHECKS):
            raise ValueError(f"two checks are named {name}")
        CHECKS.append(Definition(name, title, fn))
        return fn

    return register


@dataclass
class Launched:
    """A ``%%distrun`` cell that was run, and the job it made (None when it made none)."""

    cell: CellRun
    job_id: str | None


class Session:
    """One run of the check: its directories, environment and kernel."""

    def __init__(self, gpu: bool, log: Log, cell_timeout: float) -> None:
        self.gpu = gpu
        self.log = log
        self.cell_timeout = cell_timeout
        # Short: the zygote's Unix socket lives below it (at most 107 bytes of path).
        self.base = Path(tempfile.mkdtemp(prefix="gc-"))
        self.work = self.base / "nb"  # the notebook's directory: jobs' working dir
        self.root = self.work / ".disttrain" / "jobs"
        runtime = self.base / "run"
        for path in (self.work, runtime):
            path.mkdir(mode=0o700, parents=True)
        self.kernels = self.base / "kernels"
        write_kernelspec(self.kernels)
        self.env = {
            "DISTTRAIN_JOB_ROOT": str(self.root),
            "DISTTRAIN_VIEW": "text",  # the cell prints its view: no widget to read
            "DISTTRAIN_BACKEND": "local",  # whatever the machine would pick by itself
            "DISTTRAIN_WARM": "1",  # warm start is part of what is checked
            "DISTTRAIN_CACHE_DIR": str(self.base / "cache"),
            "XDG_RUNTIME_DIR": str(runtime),  # this run's own zygote, stopped at the end
            "JUPYTER_DATA_DIR": str(self.base / "data"),  # the index of job roots: not the user's
            "JUPYTER_RUNTIME_DIR": str(self.base / "jupyter-runtime"),
            "JUPYTER_CONFIG_DIR": str(self.base / "config"),
            "IPYTHONDIR": str(self.base / "ipython"),
            # The product from this working tree, in the kernel, its jobs and raw torchrun alike.
            "PYTHONPATH": os.pathsep.join([str(REPO), *_pythonpath(without=str(REPO))]),
        }
        metadata = product_metadata(self.base / "metadata")
        if metadata is not None:
            self.env["PYTHONPATH"] += os.pathsep + str(metadata)
            sys.path.append(str(metadata))
        self.wrote_metadata = metadata is not None
        os.environ.update(self.env)  # this process reads the same store and zygote dir
        self.store = JobStore(self.root)
        self.kernel: Kernel | None = None
        self._names: dict[str, int] = {}

    # -- the kernel -------------------------------------------------------------------------------
    def start(self) -> dict[str, float]:
        """Start the kernel, load the extension, import torch in it and wait for the zygote that
        ``%load_ext`` started (a user types meanwhile); the seconds each took."""
        t0 = time.monotonic()
        self.kernel = Kernel(self.work, dict(os.environ), self.kernels)
        times = {"kernel_ready_s": time.monotonic() - t0}
        for key, code in (("load_ext_s", "%load_ext jupyter_disttrain"), ("notebook_cell_s", NOTEBOOK)):
            ran = self.cell(code)
            if ran.error:
                raise RuntimeError(f"{code!r} failed in the kernel:\n{ran.error}")
            times[key] = ran.seconds
        times["zygote_ready_s"] = self._wait_for_zygote(t0) - t0
        return times

    def _wait_for_zygote(self, t0: float, timeout: float = 180.0) -> float:
        directory = warm.zygote_dir()
        while time.monotonic() - t0 < timeout:
            for state in directory.glob("zygote-*.json"):
                if _read_json(state).get("state") == "ready":
                    return time.monotonic()
            time.sleep(0.1)
        raise RuntimeError(f"no warm zygote became ready in {directory} within {timeout:.0f} s")

    def zygote(self) -> dict[str, Any]:
        """The state file of this run's one ready zygote (pid, state, modules); {} when none."""
        for state in warm.zygote_dir().glob("zygote-*.json"):
            data = _read_json(state)
            if data.get("state") == "ready":
                return data
        return {}

    def cell(self, code: str, timeout: float | None = None) -> CellRun:
        assert self.kernel is not None, "start() first"
        return self.kernel.run(code, timeout or self.cell_timeout)

    def distrun(self, flags: str, body: str, name: str, timeout: float | None = None) -> Launched:
        """Run ``%%distrun --name NAME-N FLAGS`` with ``body`` in the kernel; the job it made is
        found in the store by its unique name."""
        self._names[name] = self._names.get(name, 0) + 1
        unique = f"{name}-{self._names[name]}"
        ran = self.cell(f"%%distrun --name {unique} {flags}\n{body}", timeout)
        made = [r.id for r in self.store.records() if r.spec.name == unique]
        return Launched(ran, made[0] if made else None)

    # -- the job layer -----------------------------------------------------------------------------
    def job(self, job_id: str) -> api.Job:
        return api.Job(job_id, self.store)

    def record(self, job_id: str) -> JobRecord:
        return self.store.read_record(job_id)

    def status(self, job_id: str) -> JobStatus:
        return self.job(job_id).status()

    def succeeded(self, c: Check, launched: Launched, what: str) -> bool:
        """Expect the cell to have run through and its job to have Succeeded; keep the job's logs
        as evidence when not."""
        if launched.job_id is None:
            return c.expect(f"{what}: the cell made a job", False, launched.cell.error or launched.cell.text)
        status = self.status(launched.job_id)
        ok = launched.cell.error is None and status.phase is JobPhase.SUCCEEDED
        detail = f"{launched.job_id}: {status.phase.value}" + (
            f" ({status.message})" if status.message else ""
        )
        if not ok:
            self.keep_evidence(c, launched.job_id, launched.cell)
        return c.expect(f"{what}: Succeeded", ok, detail)

    def marks(self, job_id: str, replica: str = "rank-0") -> list[dict[str, Any]]:
        """The ``GC {json}`` lines a rank printed, in order."""
        out = []
        for line in self.job(job_id).logs(replica):
            if line.text.startswith(MARK):
                out.append(json.loads(line.text[len(MARK) :]))
        return out

    def mark(self, c: Check, job_id: str, key: str, replica: str = "rank-0") -> dict[str, Any]:
        """The rank's first mark that has ``key``; {} (and a failed item) when it printed none."""
        found = [m for m in self.marks(job_id, replica) if key in m]
        if not found:
            c.expect(f"{replica} of {job_id} printed its {key!r} line", False)
            self.keep_evidence(c, job_id, None)
            return {}
        return found[0]

    def started(self, job_id: str) -> str:
        """The job's Started event: which path it took (warm, cold) and why."""
        status = self.store.read_status(job_id)
        events = status.events if status else []
        return next((e.message for e in events if e.reason == "Started"), "")

    def keep_evidence(self, c: Check, job_id: str, cell: CellRun | None) -> None:
        """A failed job's story for a reader of the report: its events, each log's tail, the cell."""
        job_dir = self.store.job_dir(job_id)
        parts = []
        status = self.store.read_status(job_id)
        for event in status.events if status else []:
            parts.append(f"event {event.reason}: {event.message}")
        for log in sorted([job_dir / "launcher.log", *(job_dir / "logs").glob("*.log")]):
            if log.is_file():
                parts.append(f"--- {log.relative_to(job_dir)} (tail)\n" + _tail(log, 40))
        if cell is not None:
            parts.append(f"--- the cell's output\n{cell.text[-3000:]}\n{cell.error or ''}")
        c.evidence(job_id, "\n".join(parts))

    # -- raw torchrun ------------------------------------------------------------------------------
    def torchrun(self, job_id: str, nproc: int, timeout: float | None = None) -> tuple[str, float]:
        """Raw ``torchrun --standalone`` on job ``job_id``'s own packaged script, started as a
        shell would (the plain alternative); its output and the epoch time it was started."""
        script = self.store.job_dir(job_id) / "train.py"
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        started = time.time()
        done = subprocess.run(
            [*argv, str(script)],
            cwd=self.work,
            capture_output=True,
            text=True,
            timeout=timeout or self.cell_timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"raw torchrun exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )
        return done.stdout, started

    # -- the end -----------------------------------------------------------------------------------
    def close(self, keep: bool = False) -> None:
        """Stop what the run started: its kernel, its jobs still running (and any process left of
        its jobs: a run cut by the watchdog may leave one starting), its zygote; remove its
        directory unless ``keep``. Each step is tried whatever the one before did."""
        kernel, self.kernel = self.kernel, None
        if kernel is not None:
            self._try("closing the kernel", kernel.close)
        for record in self.store.records() if self.root.exists() else []:
            if not self.status(record.id).is_terminal:
                self.log.line(f"cancelling {record.id}, still running at the end")
                self._try(f"cancelling {record.id}", self.job(record.id).cancel)
            self._try(f"stopping what is left of {record.id}", stop_processes, job_processes(record.id), 5.0)
        self._try("stopping the zygote", warm.stop, warm.zygote_dir())
        if keep:
            self.log.line(f"kept the run's directory: {self.base}")
        else:
            shutil.rmtree(self.base, ignore_errors=True)

    def _try(self, what: str, step: Callable[..., object], *args: object) -> None:
        try:
            step(*args)
        except Exception as exc:  # the clean-up goes on: say what could not be done
            self.log.line(f"{what}: {type(exc).__name__}: {exc}")


def product_metadata(directory: Path) -> Path | None:
    """torchrun finds the product's loopback rendezvous by its entry point (pyproject.toml's
    ``torchrun.handlers``), which only an installed copy has. For a working tree that is not
    installed (the GPU machine's), write the package's metadata — name, version and entry points,
    read from pyproject.toml — into ``directory``, to go on PYTHONPATH after the tree itself: the
    code still imports from the tree. None when the entry point is there already."""
    from importlib.metadata import entry_points

    if any(ep.name == RDZV_BACKEND for ep in entry_points(group="torchrun.handlers")):
        return None
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    lines = []
    for group, points in groups.items():
        lines += [f"[{group}]", *(f"{name} = {target}" for name, target in points.items()), ""]
    dist_info = directory / f"{project['name']}-{project['version']}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    (dist_info / "entry_points.txt").write_text("\n".join(lines))
    return directory


def _pythonpath(without: str) -> list[str]:
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != without]


def stdout_marks(text: str) -> list[dict[str, Any]]:
    """The ``GC {json}`` lines in raw torchrun's output."""
    return [json.loads(line[len(MARK) :]) for line in text.splitlines() if line.startswith(MARK)]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _tail(path: Path, lines: int) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - 16384))
        return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
