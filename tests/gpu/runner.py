"""Run the GPU check: every registered check in turn, a JSON report and a log.

    python -m tests.gpu.runner [--cpu] [--out DIR] [--only NAME,...] [--budget SECONDS] [--keep]

``scripts/gpu-check.sh`` runs it (with the product on PYTHONPATH from this working tree). In GPU
mode every item runs; ``--cpu`` runs the same checks on CPU processes with their GPU items
skipped and named. The report is rewritten after each check, and a watchdog ends the run
(report written, processes stopped) if it outlives its budget. Exit status: 0 when nothing
failed, 1 when a check failed, 2 when the run could not start or was cut.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from . import checks_launch, checks_monitor, checks_training, checks_warm
from .report import FAIL, LOG_FILE, REPORT_FILE, Check, Log, Report, Result, now_iso
from .session import CHECKS, REPO, Definition, Session

# Each module registers its checks as it is imported (``@check``), in this order; a new one goes here.
CHECK_MODULES = (checks_launch, checks_warm, checks_monitor, checks_training)
PACKAGES = (
    *("torch", "ipython", "ipykernel", "jupyter_client", "pyzmq", "tornado", "nvidia-ml-py", "psutil"),
    *("packaging", "python-dateutil", "pygments", "typing_extensions"),  # the image's, used by the wheels
)
DEFAULT_BUDGET = {"gpu": 450.0, "cpu": 240.0}  # seconds: the GPU run must end within 8 minutes
CELL_TIMEOUT = {"gpu": 240.0, "cpu": 180.0}


def checks_in_order() -> list[Definition]:
    """Every registered check: module by module as ``CHECK_MODULES`` lists them, each module's in
    the order it defines them."""
    order = [m.__name__ for m in CHECK_MODULES]
    return sorted(CHECKS, key=lambda d: order.index(d.run.__module__))


def environment() -> dict[str, Any]:
    """Where the check ran: Python, torch and CUDA, the GPU and its driver (NVML), the packages
    the check uses, the commit, and how the product itself sees the GPUs."""
    import torch

    from jupyter_disttrain.backends.local.devices import visible_gpus

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "product_visible_gpus": visible_gpus(),  # the local backend's reading (--accelerator auto)
        "proc_driver_nvidia_gpus": os.path.isdir("/proc/driver/nvidia/gpus"),
        "packages": _versions(PACKAGES),
        "commit": _commit(),
    }
    if env["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        env |= {
            "gpu_count": torch.cuda.device_count(),
            "gpu": torch.cuda.get_device_name(0),
            "gpu_capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
            "gpu_memory_bytes": props.total_memory,
            "nccl": str(torch.cuda.nccl.version()),
        }
    try:
        import pynvml

        pynvml.nvmlInit()
        env["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        count = pynvml.nvmlDeviceGetCount()
        env["nvml_gpus"] = [
            _text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)
        ]
    except Exception as exc:  # no NVML here (CPU mode): say why
        env["nvml"] = f"{type(exc).__name__}: {exc}"
    return env


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _versions(names: tuple[str, ...]) -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
        )
    except OSError:  # no git on the machine
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def run_check(definition: Definition, session: Session, log: Log) -> Result:
    """One check, timed; an exception fails it with its traceback (the run goes on)."""
    result = Result(definition.name, definition.title)
    log.line(f"== {definition.name}: {definition.title}")
    start = time.monotonic()
    try:
        definition.run(session, Check(result, session.gpu, log))
    except Exception:
        result.error = traceback.format_exc(limit=8)
        log.line(f"    FAIL raised:\n{result.error}")
    result.seconds = round(time.monotonic() - start, 2)
    result.settle()
    log.line(f"-> {result.status} {definition.name} ({result.seconds:.1f} s)")
    return result


class Watchdog:
    """Ends a run that outlives its budget: the report says where it was cut (no result of a
    check after that), the run's processes are stopped, and the process exits 2."""

    def __init__(self, seconds: float, report: Report, path: Path, log: Log) -> None:
        self.report, self.path, self.log = report, path, log
        self.session: Session | None = None
        self.current = "setup"
        self._lock = threading.Lock()
        self._fired = self._stopped = False
        self._timer = threading.Timer(seconds, self._fire, args=(seconds,))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, seconds: float) -> None:
        with self._lock:
            if self._stopped:
                return
            self._fired = True
            self.report.aborted = f"the run passed its budget of {seconds:.0f} s during {self.current}"
            self.report.finished = now_iso()
            self.report.write(self.path)
        self.log.line(f"!! {self.report.aborted}: stopping")
        if self.session is not None:
            with contextlib.suppress(Exception):
                self.session.close()
        os._exit(2)

    def record(self, result: Result) -> None:
        """Add a check's result to the report and write it; once the run was cut, the watchdog
        is ending the process: this thread waits for that."""
        with self._lock:
            if not self._fired:
                self.report.checks.append(result)
                self.report.write(self.path)
                return
        threading.Event().wait()

    def stop(self) -> None:
        """The run ends by itself: no more watching (or, if it was cut meanwhile, wait for the end)."""
        with self._lock:
            self._timer.cancel()
            self._stopped = not self._fired
        if not self._stopped:
            threading.Event().wait()


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[Definition]]:
    """The options, and the checks they choose (all, in order, unless ``--only``)."""
    ap = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="CPU mode: GPU items skipped and named")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build" / "gpu-check"))
    ap.add_argument("--only", default="", help="comma-separated check names (default: all)")
    ap.add_argument("--budget", type=float, help="seconds the whole run may take")
    ap.add_argument("--keep", action="store_true", help="keep the run's directory (jobs, logs)")
    args = ap.parse_args(argv)
    every = checks_in_order()
    named = set(filter(None, args.only.split(",")))
    unknown = named - {d.name for d in every}
    if unknown:
        ap.error(
            f"no check named {', '.join(sorted(unknown))}; the checks: {', '.join(d.name for d in every)}"
        )
    return args, [d for d in every if not named or d.name in named]


def run_all(session: Session, chosen: list[Definition], report: Report, watchdog: Watchdog) -> None:
    """Start the session, then each chosen check in turn; a failure to start ends the run."""
    try:
        times = {key: round(seconds, 2) for key, seconds in session.start().items()}
        report.setup = {**times, "wrote_package_metadata": session.wrote_metadata}
        session.log.line(f"setup: {report.setup}")
        for definition in chosen:
            watchdog.current = definition.name
            watchdog.record(run_check(definition, session, session.log))
    except Exception:
        report.aborted = traceback.format_exc(limit=8)
        session.log.line(f"!! the run stopped: {report.aborted}")


def summarise(report: Report, log: Log, path: Path) -> None:
    """The closing lines: each check's status and its skipped items, then the counts."""
    for result in report.checks:
        skipped = [i.what for i in result.items if i.status == "SKIP"]
        note = f"; skipped: {skipped}" if skipped else ""
        log.line(f"{result.status:4} {result.name} ({result.seconds:.1f} s){note}")
    log.line(f"summary: {report.summary()} in {report.seconds:.0f} s; report: {path}")


def main(argv: list[str] | None = None) -> int:
    args, chosen = parse(argv)
    mode = "cpu" if args.cpu else "gpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / LOG_FILE).unlink(missing_ok=True)
    log, path = Log(out / LOG_FILE), out / REPORT_FILE
    report = Report(mode=mode, started=now_iso())
    budget = args.budget or DEFAULT_BUDGET[mode]
    watchdog = Watchdog(budget, report, path, log)
    start = time.monotonic()
    log.line(f"gpu check, {mode} mode, budget {budget:.0f} s; report: {path}")
    report.environment = environment()
    log.line(f"environment: {report.environment}")
    if mode == "gpu" and not report.environment["cuda_available"]:
        report.aborted = "GPU mode, but torch sees no GPU here: run with --cpu, or on a GPU machine"
        log.line(f"!! {report.aborted}")
        watchdog.stop()
    else:
        session = Session(mode == "gpu", log, CELL_TIMEOUT[mode])
        watchdog.session = session
        try:
            run_all(session, chosen, report, watchdog)
        finally:
            watchdog.stop()
            session.close(keep=args.keep)
    report.finished = now_iso()
    report.seconds = round(time.monotonic() - start, 1)
    report.write(path)
    summarise(report, log, path)
    log.close()
    if report.aborted is not None:
        return 2
    return 1 if any(r.status == FAIL for r in report.checks) else 0


if __name__ == "__main__":
    sys.exit(main())
