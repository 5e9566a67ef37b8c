"""``DistTrainApp``: the jupyter_server extension, its settings and its lifetime."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Dict, Float, Int, List, TraitError, Unicode, default, validate

from ..backends import default_backend_name
from ..jobs.diagnosis import check_settings
from ..jobs.intake import MAX_LOG_LIMIT
from ..model.errors import InvalidSpecError
from ..model.flags import duration_seconds
from ..storage.store import ROOT_ENV, open_store
from . import routes
from .caching_store import CachingJobStore
from .context import SETTINGS_KEY, ServerContext
from .jobs import JobService
from .tensorboard import TensorBoardManager, check_command


class DistTrainApp(ExtensionApp):
    """Jobs API, live logs and TensorBoard for jupyter_disttrain, inside the Jupyter server.

    Configure it like any Jupyter app, e.g. in ``jupyter_server_config.py``::

        c.DistTrainApp.job_root = "/shared/jobs"
        c.DistTrainApp.tensorboard_reload_interval = 2
    """

    name = "jupyter_disttrain"
    load_other_extensions = True

    job_root = Unicode(
        "",
        help="""Directory of the job store: jobs submitted through the server go there, and
        only its jobs are listed. Empty: $DISTTRAIN_JOB_ROOT (that root only) when that is set,
        else <root_dir>/.disttrain/jobs, listed with every job root the user has used (the
        index in the Jupyter data dir). The server exports the root it submits to as
        $DISTTRAIN_JOB_ROOT, so kernels and terminals it starts submit to the same store.""",
    ).tag(config=True)

    default_backend = Unicode(
        help="""Backend for jobs submitted through the API without one ('local',
        'kubernetes', 'slurm' or a plugin's name). Default: $DISTTRAIN_BACKEND, else kubernetes
        inside a pod with a service account when the kubernetes client is installed, else slurm
        inside a Slurm allocation of more than one node, else local.""",
    ).tag(config=True)

    warm_start = Bool(
        True,
        help="""Fork local jobs' ranks from a warm zygote that has torch imported
        (docs/warm-start.md): one is started with the server, in the background, and ends with it. False
        runs every local job's torchrun afresh, for kernels started by this server too (it
        exports $DISTTRAIN_WARM=0 to them, as a user may in any environment).""",
    ).tag(config=True)

    tensorboard_command = List(
        Unicode(),
        help="""A Python that has TensorBoard installed, then extra TensorBoard flags, e.g.
        [sys.executable] (the default) or ['/opt/tb/bin/python', '--samples_per_plugin',
        'scalars=5000']. The server runs TensorBoard with it on a private Unix socket (through
        jupyter_disttrain/server/tb_serve.py) and sets --logdir, --path_prefix, --load_fast,
        --reload_interval and --reload_multifile* itself; setting any of those here is an error.""",
    ).tag(config=True)

    keep_warm = Unicode(
        "",
        help="""The default of Kubernetes jobs' --keep-warm (e.g. "20m"): how long a job's pods stay
        as a warm pool when idle, for re-runs of the same shape to fork in (docs/warm-start.md).
        Exported to the kernels it starts as $DISTTRAIN_KEEP_WARM. Empty (the default): off, as
        kept pods hold their GPUs, which cost money while nobody uses them.""",
    ).tag(config=True)

    tensorboard_reload_interval = Float(
        1.0,
        help="""Seconds between TensorBoard's scans for new event files and points (TensorBoard's
        own default is 5; whole seconds, at least 1).""",
    ).tag(config=True)

    tensorboard_multifile_inactive_secs = Int(
        86400,
        help="""TensorBoard follows every event file of a run directory (--reload_multifile), so
        several writers in one directory (the user's SummaryWriter and a logger, a restarted rank)
        all show new points; a file with no event newer than this many seconds is no longer
        polled (--reload_multifile_inactive_secs). A day: a live job's slowest writer (one
        point per epoch) stays followed. The same for '_all': with 50 finished jobs TensorBoard's
        CPU is the same with this on or off (bench/bench_tensorboard_multifile.py).
        -1: no limit; 0: only the newest file of each run.""",
    ).tag(config=True)

    tensorboard_idle_timeout = Float(
        1800.0,
        help="Stop a TensorBoard after this many seconds without a request through the proxy (0: never).",
    ).tag(config=True)

    tensorboard_ready_timeout = Float(
        60.0, help="Seconds to wait for a new TensorBoard to answer before reporting an error."
    ).tag(config=True)

    log_poll_interval = Float(
        0.05,
        help="Seconds between checks for new log lines while a client follows a job's logs.",
    ).tag(config=True)

    log_batch_lines = Int(
        5000,
        help="Most lines sent in one log-stream event (one bounded read of the log files; at most 10000).",
    ).tag(config=True)

    guard = Unicode(
        "",
        help="""The stall and idle guard's defaults for jobs submitted through this server and
        the kernels it starts (exported to them as $DISTTRAIN_GUARD; a job's own flags win), e.g.
        "guard=cancel,stall_floor=300,idle_below=10,idle_window=1800": the flags --guard
        (notify, diagnose, cancel, off), --stall-factor, --stall-floor, --idle-below and
        --idle-window without their dashes. The guard of a local or Slurm job runs in its
        launcher, with or without this server; a Kubernetes job's in this server.""",
    ).tag(config=True)

    prices = Dict(
        help="""The price table that turns resource-hours into money in the details and the Runs
        view: per allocated GPU-hour and CPU core-hour, e.g. {"gpu": 2.5, "core": 0.04,
        "currency": "USD", "backends": {"kubernetes": {"gpu": 3.1}}}. Exported to the kernels
        it starts as $DISTTRAIN_PRICES. Empty: no cost is shown.""",
    ).tag(config=True)

    worker_threads = Int(
        8, help="Threads for blocking backend calls (file reads, cluster API requests)."
    ).tag(config=True)

    @default("default_backend")
    def _default_backend(self) -> str:
        return default_backend_name()

    @default("tensorboard_command")
    def _default_tensorboard_command(self) -> list[str]:
        return [sys.executable]

    @validate("tensorboard_command")
    def _check_tensorboard_command(self, proposal: Any) -> list[str]:
        try:
            return check_command(list(proposal["value"]))
        except InvalidSpecError as exc:
            raise TraitError(str(exc)) from None

    @validate("guard", "prices")
    def _check_guard_and_prices(self, proposal: Any) -> Any:
        try:
            name = proposal["trait"].name
            check_settings(
                proposal["value"] if name == "guard" else "", proposal["value"] if name == "prices" else {}
            )
        except InvalidSpecError as exc:
            raise TraitError(str(exc)) from None
        return proposal["value"]

    @validate("log_batch_lines")
    def _check_batch(self, proposal: Any) -> int:
        if not 1 <= proposal["value"] <= MAX_LOG_LIMIT:
            raise TraitError(f"log_batch_lines must be between 1 and {MAX_LOG_LIMIT}")
        return int(proposal["value"])

    @validate("tensorboard_multifile_inactive_secs")
    def _check_inactive(self, proposal: Any) -> int:
        if proposal["value"] < -1:
            raise TraitError(f"{proposal['trait'].name} must be -1 (no limit), 0 or more seconds")
        return int(proposal["value"])

    @validate("tensorboard_reload_interval", "log_poll_interval")
    def _check_positive(self, proposal: Any) -> float:
        if proposal["value"] <= 0:
            raise TraitError(f"{proposal['trait'].name} must be more than 0")
        return float(proposal["value"])

    def initialize_settings(self) -> None:
        root_dir = getattr(self.serverapp, "root_dir", None) or os.getcwd()
        default = Path(root_dir).expanduser().resolve() / ".disttrain" / "jobs"
        store = open_store(self.job_root or None, default=default, store_class=CachingJobStore)
        root = store.root
        os.environ[ROOT_ENV] = str(root)  # kernels and terminals started from now on agree
        os.environ.update(check_settings(self.guard, dict(self.prices)))  # (so do they on these)
        if self.keep_warm:
            duration_seconds(self.keep_warm, "c.DistTrainApp.keep_warm", "off")
            os.environ["DISTTRAIN_KEEP_WARM"] = self.keep_warm
        self._start_warm()
        base_url = self.serverapp.base_url if self.serverapp is not None else "/"
        self._context = ServerContext(
            service=JobService(store, self.default_backend),
            executor=ThreadPoolExecutor(self.worker_threads, thread_name_prefix="disttrain"),
            tensorboard=TensorBoardManager(
                store,
                self.tensorboard_command,
                base_url,
                reload_interval=self.tensorboard_reload_interval,
                multifile_inactive_secs=self.tensorboard_multifile_inactive_secs,
                idle_timeout=self.tensorboard_idle_timeout,
                ready_timeout=self.tensorboard_ready_timeout,
                log=self.log,
            ),
            log_poll_interval=self.log_poll_interval,
            log_batch_lines=self.log_batch_lines,
        )
        self.settings[SETTINGS_KEY] = self._context
        self._start_guard()
        # One listing in the background: every job and run is read and summarised once now, so
        # the UI's first listings are as quick as the later ones (the runs of jobs that ended a
        # while ago are kept, tracking/sources.py).
        self._context.executor.submit(self._warm_listing)
        self.log.info(
            "jupyter_disttrain: job store %s (listing %s), default backend %s",
            root,
            "its jobs only" if len(store.roots()) == 1 else "every indexed job root too",
            self.default_backend,
        )

    def _start_warm(self) -> None:
        from ..jobs.warmup import start

        # Off: the kernels it starts run cold too. On: the zygote ends with this server.
        if start(os.environ, enabled=self.warm_start, parent=os.getpid()) is not None:
            self.log.info("jupyter_disttrain: a warm zygote is starting for local jobs")

    def _start_guard(self) -> None:
        """Guard the jobs no launcher of ours guards (Kubernetes'), while this server runs."""
        from ..jobs.guard import ServerGuard

        self._guard_stop = threading.Event()
        guard = ServerGuard(self._context.service.manager)
        threading.Thread(
            target=guard.run, args=(self._guard_stop,), name="disttrain-guard", daemon=True
        ).start()

    def _warm_listing(self) -> None:
        try:
            self._context.service.manager.list_runs()  # lists the jobs on the way
        except Exception:  # a worker thread's error would vanish unseen: log it
            self.log.warning("jupyter_disttrain: could not read the job store", exc_info=True)

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes.handlers())

    async def stop_extension(self) -> None:
        """Stop every TensorBoard and the worker threads when the server shuts down."""
        context: ServerContext | None = getattr(self, "_context", None)
        if context is None:
            return
        self._guard_stop.set()
        await context.tensorboard.stop_all()
        context.executor.shutdown(wait=False, cancel_futures=True)
        context.cancel_executor.shutdown(wait=False, cancel_futures=True)
