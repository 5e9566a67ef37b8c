"""``%%distrun``: run a notebook cell as a distributed PyTorch job.

Loading this module imports IPython and the job model only; torch, the backends' clients and
the packaging analysis load when a cell first runs.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .errors import DistTrainError
from .specs import EXIT_TIMEOUT_HELP, OVERSUBSCRIBE_HELP, JobPhase

if TYPE_CHECKING:
    from .api import Job
    from .packaging import PackagedScript
    from .specs import JobSpec, JobStatus

# New output shows within 0.1 s while it flows, within a second while the job is quiet.
_FOLLOW = (0.1, 1.0)


class JobFailedError(Exception):
    """A followed job ended Failed or Cancelled: the cell fails, so Run All and nbclient stop.

    IPython shows it as one line (``_render_traceback_``): the cause is the job's, not this
    kernel's, and the cell's summary above already shows the root-cause rank's last lines.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def _count(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1 or str(value) != text.strip():
            raise argparse.ArgumentTypeError(
                f"{flag} takes a whole number of at least 1 (e.g. {flag} 2), not {text!r}"
            )
        return value

    return parse


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"--max-restarts takes a whole number of 0 or more, not {text!r}")
    return int(text)


def _key_value(flag: str) -> Callable[[str], tuple[str, str]]:
    def parse(text: str) -> tuple[str, str]:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(
                f"{flag} takes KEY=VALUE (e.g. {flag} NCCL_DEBUG=INFO), not {text!r}"
            )
        return key, value

    return parse


def _split_script_args(line: str) -> tuple[list[str], list[str]]:
    """Flags for us before ``--``; everything after it goes to the script untouched.

    The line is split once, by shell rules (``--name 'mnist'``, ``--env "MSG=hello world"``);
    IPython's own ``parse_argstring`` would keep the quotes as part of the values.
    """
    try:
        tokens = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"%%distrun: cannot read the options ({exc}); check the quotes") from None
    if "--" in tokens:
        i = tokens.index("--")
        return tokens[:i], tokens[i + 1 :]
    return tokens, []


def _cluster_args(f: Any) -> Any:
    """Flags that only a cluster backend uses (Kubernetes)."""
    args = [
        argument("--image", help="container image (default: the notebook pod's own image)"),
        argument(
            "--pvc",
            action="append",
            default=[],
            metavar="CLAIM:PATH[:ro]",
            help="mount a PVC in every pod (repeatable; default: the notebook pod's PVC mounts)",
        ),
        argument("--cpu", help="CPU request and limit per pod, e.g. 8"),
        argument("--memory", help="memory request and limit per pod, e.g. 64Gi"),
        argument("--shm-size", help="size of /dev/shm (a Memory emptyDir), e.g. 16Gi"),
        argument(
            "--node-selector",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            type=_key_value("--node-selector"),
        ),
        argument("--toleration", action="append", default=[], metavar="KEY[=VALUE]:EFFECT"),
        argument("--namespace", help="namespace (default: the notebook's)"),
        argument("--service-account", help="service account of the pods"),
        argument("--priority-class", help="priority class of the pods"),
        argument("--queue", help="scheduling queue, where the flavour has one"),
        argument("--flavor", choices=["job", "pytorchjob", "t9k"], help="workload kind (default: detected)"),
        argument(
            "--colocate",
            action="store_true",
            help="run every pod on the notebook pod's node (to share a ReadWriteOnce PVC)",
        ),
        argument(
            "--pending-timeout",
            metavar="DURATION",
            help="fail the job when its pods have not all started after this long (default 15m; 0: wait)",
        ),
    ]
    for a in args:
        f = a(f)
    return f


@magics_class
class DistTrainMagics(Magics):
    """``%%distrun`` and ``%distrun list|status|logs|cancel|delete``."""

    @magic_arguments()
    @argument(
        "--gpus",
        type=_count("--gpus"),
        default=1,
        help="processes per node: one per GPU, or CPU processes (gloo) where there is no GPU",
    )
    @argument(
        "--nodes",
        type=_count("--nodes"),
        default=1,
        help="number of nodes (torchrun agents); several on one machine for the local backend",
    )
    @argument(
        "--name",
        default="distrun",
        help="job name: lower-case letters, digits and '-' (Kubernetes: starting with a letter)",
    )
    @argument(
        "--backend",
        default=None,
        help="local (default) or kubernetes (default inside a pod, with the kubernetes client installed)",
    )
    @argument(
        "--max-restarts",
        type=_non_negative,
        default=0,
        help="restarts on failure (local: torchrun --max-restarts; Kubernetes: the backoff limit)",
    )
    @argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_key_value("--env"),
        help="environment variable for the training processes (repeatable)",
    )
    @argument(
        "--accelerator",
        choices=["auto", "gpu", "cpu"],
        default="auto",
        help="cpu forces CPU processes even where GPUs exist",
    )
    @argument("--oversubscribe", action="store_true", help=OVERSUBSCRIBE_HELP)
    @argument("--exit-timeout", type=float, default=None, metavar="SECONDS", help=EXIT_TIMEOUT_HELP)
    @argument(
        "--dry-run",
        action="store_true",
        help="print the packaged script and the exact launch request; run nothing",
    )
    @argument(
        "--detach", action="store_true", help="return at once; follow later with %%distrun logs ID --follow"
    )
    @argument(
        "--cancel-on-interrupt",
        action="store_true",
        help="interrupting the cell cancels the job (by default it only stops following)",
    )
    @argument(
        "--no-check",
        action="append",
        default=[],
        metavar="CODE",
        help="silence one DDP pitfall check (repeatable), or 'all'",
    )
    @_cluster_args
    @line_cell_magic
    def distrun(self, line: str, cell: str | None = None) -> None:
        """Run this cell as a distributed PyTorch job under torchrun.

        The cell, plus the imports, functions, classes and values it uses from earlier cells,
        becomes a standalone script (``train.py`` in the job's directory). Script arguments go
        after ``--``. The training processes get torchrun's env (RANK, LOCAL_RANK, WORLD_SIZE,
        ...) plus DISTTRAIN_JOB_ID, DISTTRAIN_JOB_DIR and DISTTRAIN_TENSORBOARD_DIR.

        Examples::

            %%distrun --gpus 2
            %%distrun --gpus 4 --nodes 2 --backend kubernetes --shm-size 16Gi
            %%distrun --gpus 2 --dry-run -- --epochs 3

        As a line magic::

            %distrun list
            %distrun status JOB_ID
            %distrun logs JOB_ID [--replica rank-0] [--tail 50] [--follow]
            %distrun cancel JOB_ID
            %distrun delete JOB_ID [--purge]
        """
        if cell is None:
            return self._line(line)
        try:
            self._cell(line, cell)
        except DistTrainError as exc:
            raise UsageError(f"%%distrun: {exc}") from None

    # -- the cell --------------------------------------------------------------------------
    def _cell(self, line: str, cell: str) -> None:
        flags, script_args = _split_script_args(line)
        try:
            args = self.distrun.parser.parse_args(flags)
        except UsageError as exc:
            hint = ""
            if "unrecognized arguments" in str(exc):
                hint = (
                    "; script arguments go after --, e.g. %%distrun --gpus 2 -- --epochs 3 (see %%distrun?)"
                )
            raise UsageError(f"%%distrun: {exc}{hint}") from None
        spec = self._spec(args, script_args)
        carried = _carry_kernel_env(spec)
        packaged = self._package(cell, args, spec)
        from . import api

        if args.dry_run:
            info = api.dryrun(packaged.source, spec, files=packaged.files)
            print(f"# ---- {spec.entrypoint} (job {info.job_id}, not launched) ----")
            print("\n".join(f"# from the kernel: {line}" for line in carried))
            if packaged.captured:
                print(f"# from earlier cells: {', '.join(packaged.captured)}")
            print("\n".join(f"# capture: {line}" for line in packaged.explanation))
            print(packaged.source)
            for name in sorted(packaged.files):
                print(f"# side file: {name} ({len(packaged.files[name])} bytes)")
            print(f"# ---- launch request ({info.backend} backend) ----")
            print(info.text)
            return
        job = api.submit(packaged.source, spec, files=packaged.files)
        if args.detach:
            print(f"job {job.id} submitted ({spec.backend}); follow it with: %distrun logs {job.id} --follow")
            return
        status = self._follow(job, args.cancel_on_interrupt)
        if status is not None and status.phase in (JobPhase.FAILED, JobPhase.CANCELLED):
            from .failure import failure_line

            raise JobFailedError(f"%%distrun: {failure_line(status)}")

    def _package(self, cell: str, args: argparse.Namespace, spec: JobSpec) -> PackagedScript:
        """The cell and what it uses as a script, checked before launch (warnings printed)."""
        from .api import job_target
        from .packaging import package_cell

        ignore = {"*"} if "all" in args.no_check else set(args.no_check)
        history = _history_as_typed(self.shell)
        user_ns = self.shell.user_ns if self.shell else {}
        notebook = user_ns.get("__session__")  # ipykernel sets it to the notebook's path
        header = f"Notebook: {notebook}" if isinstance(notebook, str) and notebook else None
        # cell_line=2: JupyterLab numbers the %%distrun line 1, the cell's code from 2.
        packaged = package_cell(
            cell, history, user_ns, ignore=ignore, header=header, target=job_target(spec), cell_line=2
        )
        for pit in packaged.pitfalls:
            print(f"warning: {pit.where}: {pit.message}  [silence: --no-check {pit.code}]")
        return packaged

    def _spec(self, args: argparse.Namespace, script_args: list[str]) -> JobSpec:
        from .api import make_spec
        from .specs import Volume

        options: dict[str, Any] = {}
        keys = (
            "shm_size",
            "namespace",
            "service_account",
            "priority_class",
            "queue",
            "flavor",
            "pending_timeout",
        )
        for key in keys:
            value = getattr(args, key)
            if value is not None:
                options[key] = value
        if args.node_selector:
            options["node_selector"] = dict(args.node_selector)
        if args.toleration:
            options["tolerations"] = list(args.toleration)
        if args.colocate:
            options["colocate"] = True
        if args.oversubscribe:
            options["oversubscribe"] = True
        if args.exit_timeout is not None:
            options["exit_timeout"] = args.exit_timeout
        fields: dict[str, Any] = {"accelerator": args.accelerator}
        for key in ("image", "cpu", "memory"):
            if getattr(args, key) is not None:
                fields[key] = getattr(args, key)
        if args.pvc:
            fields["volumes"] = [Volume.parse(v) for v in args.pvc]
        return make_spec(
            gpus=args.gpus,
            nodes=args.nodes,
            name=args.name,
            backend=args.backend,
            args=script_args,
            env=dict(args.env),
            max_restarts=args.max_restarts,
            options=options,
            **fields,
        )

    def _follow(self, job: Job, cancel_on_interrupt: bool) -> JobStatus | None:
        """Show status and output until the job ends and return its end (None if interrupted).

        An interrupt stops following only (or cancels, if asked); it never fails the cell.
        """
        from .failure import root_cause
        from .widgets import SUMMARY_LINES, make_view

        def cancel() -> None:
            job.cancel()

        from .logfiles import Budget
        from .polling import Backoff

        view = make_view(job.id, str(job.dir), cancel)
        offset: str | None = None
        poll = Backoff(*_FOLLOW)
        last_phase = None
        try:
            while True:
                status = job.status()  # before reading: output written before the end is never missed
                view.update(status)
                lines = list(job.logs(offset=offset, budget=Budget()))  # a bounded read per poll
                rank_lines = [ln for ln in lines if ln.rank is not None]
                if lines:
                    offset = lines[-1].offset
                if rank_lines:
                    view.append(rank_lines)
                if status.is_terminal and not lines:
                    break
                poll.wait(active=bool(lines) or status.phase != last_phase)
                last_phase = status.phase
            cause = root_cause(status) if status.phase is JobPhase.FAILED else None
            if cause is not None:
                view.failure(cause.name, list(job.logs(cause.name, tail=SUMMARY_LINES)))
            return status
        except KeyboardInterrupt:
            if cancel_on_interrupt:
                view.update(job.cancel())
                print(f"job {job.id} cancelled")
            else:
                print(
                    f"stopped following; job {job.id} keeps running. "
                    f"Cancel it with: %distrun cancel {job.id}   (or use --cancel-on-interrupt)"
                )
            return None
        finally:
            view.close()

    # -- the line magic --------------------------------------------------------------------
    def _line(self, line: str) -> None:
        try:
            _run_command(shlex.split(line), print)
        except DistTrainError as exc:
            raise UsageError(f"%distrun: {exc}") from None
        except SystemExit:
            pass  # argparse already printed the usage error


def _history_as_typed(shell: Any) -> list[str]:
    """The earlier cells (``In[1:-1]``), each with the leading blank lines IPython dropped put back,
    so that line numbers in messages are the ones JupyterLab shows."""
    if shell is None:
        return []
    parsed = list(shell.user_ns.get("In", [""]))[1:-1]
    raw = list(getattr(shell.history_manager, "input_hist_raw", []))[1:-1]
    if len(raw) != len(parsed):
        return parsed
    out = []
    for typed, cell in zip(raw, parsed, strict=True):
        lines = typed.split("\n") if isinstance(typed, str) else []
        blank = next((i for i, line in enumerate(lines) if line.strip()), 0)
        out.append("\n" * blank + cell if isinstance(cell, str) else cell)
    return out


def _carry_kernel_env(spec: JobSpec) -> list[str]:
    """Give the job what earlier cells changed in the kernel (sys.path, os.environ, working dir);
    returns the dry run's lines about it."""
    from .kernelenv import kernel_env

    carried = kernel_env()
    carried.apply(spec)
    return carried.describe()


def _run_command(argv: list[str], out: Callable[[str], Any]) -> None:
    """The subcommands shared by ``%distrun`` and ``jupyter disttrain``."""
    from .commands import run_subcommand

    run_subcommand(argv, out, command="%distrun")
