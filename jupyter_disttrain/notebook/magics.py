"""``%%distrun``: run a notebook cell as a distributed PyTorch job.

Loading this module imports IPython and the job model only; torch, the backends' clients and
the packaging analysis load when a cell first runs.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ..jobs.errors import JobCancelledError, JobFailedError, job_error
from ..model.errors import DistTrainError
from ..model.specs import DEFAULT_NAME, JobPhase

if TYPE_CHECKING:
    from ..api import Job
    from ..model.specs import JobSpec, JobStatus
    from ..packaging import PackagedScript
    from ..payloads.jobs import Failure

# The errors a cell raises live with the job layer (``Job.result()`` raises them too).
__all__ = ["DistTrainMagics", "JobCancelledError", "JobFailedError", "warm_up"]


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


def _job_flags(f: Any) -> Any:
    """The job's flags, generated from their declarations (``intake.job_flag_classes``): the
    same as ``jupyter disttrain run``'s."""
    from ..jobs.intake import job_flag_classes
    from ..model.flags import add_flags

    decorators: list[Any] = []
    add_flags(lambda *names, **kwargs: decorators.append(argument(*names, **kwargs)), job_flag_classes())
    for decorate in reversed(decorators):  # IPython lists arguments in decoration order, bottom up
        f = decorate(f)
    return f


def warm_up(ipython: Any) -> None:
    """Warm start: this kernel's zygote starts now, in the background, so that even the first
    ``%%distrun`` forks its ranks from a process that has torch imported; the heavy libraries the
    notebook imports later reach it as they are imported (``warm.Preloader``)."""
    from ..jobs.warmup import start

    preload = start(os.environ)
    if preload is not None:
        ipython.events.register("post_run_cell", preload)


@magics_class
class DistTrainMagics(Magics):
    """``%%distrun`` and ``%distrun list|status|logs|stack|diagnose|checkpoints|cancel|delete|pools``."""

    @magic_arguments()
    @_job_flags
    @line_cell_magic
    def distrun(self, line: str, cell: str | None = None) -> None:
        """Run this cell as a distributed PyTorch job.

        The cell, plus the imports, functions, classes and values it uses from earlier cells,
        becomes a standalone script (``train.py`` in the job's directory). Script arguments go
        after ``--``. ``--launcher`` lays the processes out (torchrun by default; DeepSpeed,
        MXNet parameter servers, Horovod). The ranks get torchrun's env (RANK, LOCAL_RANK,
        WORLD_SIZE, ...), every process DISTTRAIN_JOB_ID, DISTTRAIN_JOB_DIR and
        DISTTRAIN_TENSORBOARD_DIR.

        Examples::

            %%distrun --gpus 2
            %%distrun --gpus 4 --nodes 2 --backend kubernetes --shm-size 16Gi
            %%distrun --gpus 2 --dry-run -- --epochs 3
            %%distrun --gpus 2 --resume JOB_ID:latest --keep-checkpoints 3
            %%distrun --gpus 2 --out model,losses --out-all preds
            %%distrun --gpus 2 --pdb

        As a line magic::

            %distrun list
            %distrun status JOB_ID
            %distrun logs JOB_ID [--replica rank-0] [--tail 50] [--follow]
            %distrun stack JOB_ID [--replica rank-1]
            %distrun diagnose JOB_ID
            %distrun checkpoints JOB_ID
            %distrun load JOB_ID            (its --out values, into this kernel)
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
        spec.hparams = packaged.hparams
        from .. import api
        from ..jobs.intake import choose_launcher
        from ..jobs.values import describe as describe_values

        chosen = choose_launcher(spec, bool(args.launcher), packaged.source)

        if args.dry_run:
            info = api.dryrun(packaged.source, spec, files=packaged.files)
            print(f"# ---- {spec.entrypoint} (job {info.job_id}, not launched) ----")
            print("\n".join(f"# from the kernel: {line}" for line in carried))
            if chosen:
                print(f"# {chosen}")
            if packaged.captured:
                print(f"# from earlier cells: {', '.join(packaged.captured)}")
            print("\n".join(f"# {line}" for line in describe_values(spec)))
            print("\n".join(f"# capture: {line}" for line in packaged.explanation))
            print(packaged.source)
            for name in sorted(packaged.files):
                print(f"# side file: {name} ({len(packaged.files[name])} bytes)")
            for name, data in sorted(info.side_files.items()):
                print(f"# side file: {name} ({len(data)} bytes, from the {spec.launcher} launcher)")
            print(f"# ---- launch request ({info.backend} backend) ----")
            print(info.text)
            return
        job = api.submit(packaged.source, spec, files=packaged.files)
        if args.detach:
            print(f"job {job.id} submitted ({spec.backend}); follow it with: %distrun logs {job.id} --follow")
            return
        status, story = self._follow(job, args.cancel_on_interrupt)
        if status is not None:
            self._end(job, status, story)

    def _end(self, job: Job, status: JobStatus, story: Failure | None) -> None:
        """The cell ends as its job did: a cancelled or failed job raises (a failed one the root
        cause's own exception type where the kernel has it: ``jobs/errors.py``); a job that
        succeeded brings its ``--out`` values into the kernel."""
        user_ns = self.shell.user_ns if self.shell else {}
        if status.phase is JobPhase.CANCELLED:
            raise JobCancelledError(f"%%distrun: job {job.id} cancelled")
        if status.phase is JobPhase.FAILED:
            from ..model.failure import failure_line

            raise job_error(f"%%distrun: {failure_line(status)}", story, user_ns)
        if status.phase is JobPhase.SUCCEEDED and (job.spec.out or job.spec.out_all):
            from .values import bring_back

            bring_back(job, status, user_ns, print)

    def _package(self, cell: str, args: argparse.Namespace, spec: JobSpec) -> PackagedScript:
        """The cell and what it uses as a script, checked before launch (warnings printed)."""
        from ..api import job_target, kernel_dirs
        from ..packaging import package_cell
        from ..packaging.origins import CELL_LABEL

        ignore = {"*"} if "all" in args.no_check else set(args.no_check)
        history = _history_as_typed(self.shell)
        user_ns = self.shell.user_ns if self.shell else {}
        notebook = user_ns.get("__session__")  # ipykernel sets it to the notebook's path
        header = f"Notebook: {notebook}" if isinstance(notebook, str) and notebook else None
        # cell_line=2: JupyterLab numbers the %%distrun line 1, the cell's code from 2.
        # The cell being run is the last of ``In`` (IPython stores it before running it); its
        # index there is the number JupyterLab shows (``execution_count`` is one ahead by then).
        count = len(user_ns.get("In") or []) - 1
        packaged = package_cell(
            cell,
            history,
            user_ns,
            ignore=ignore,
            header=header,
            target=job_target(spec),
            cell_line=2,
            cell_label=f"In [{count}]" if count > 0 else CELL_LABEL,
            kernel_dirs=kernel_dirs(),
        )
        for pit in packaged.pitfalls:
            print(f"warning: {pit.where}: {pit.message}  [silence: --no-check {pit.code}]")
        for note in packaged.notes:
            print(f"note: {note}")
        return packaged

    def _spec(self, args: argparse.Namespace, script_args: list[str]) -> JobSpec:
        from ..jobs.intake import spec_from_flags

        return spec_from_flags(args, script_args, default_name=DEFAULT_NAME)

    def _follow(self, job: Job, cancel_on_interrupt: bool) -> tuple[JobStatus | None, Failure | None]:
        """Show status and output until the job ends and return its end and, when it failed, why
        (None if interrupted).

        An interrupt stops following only (or cancels, if asked); it never fails the cell.
        """
        from ..launchers.base import process_replicas, recorded_roles
        from .debug import PromptFeed
        from .progress import ProgressFeed
        from .textview import SUMMARY_LINES, IncidentFeed, TextView, UsageFeed
        from .widgets import make_view

        def cancel() -> None:
            job.cancel()

        view = make_view(job.id, str(job.dir), cancel)
        feed = UsageFeed(job.resources)
        diagnoses = IncidentFeed(lambda: job.incidents(limit=1))
        bar = ProgressFeed(job.progress, job.runs)
        prompts = PromptFeed(job, view, text=isinstance(view, TextView))  # breakpoint() in a rank
        running = False
        own = process_replicas(recorded_roles(job.spec, job.record.request.get("roles") or []))
        try:
            for page in job.follow():  # each page: the status, then the lines written since
                status = page.status
                view.update(status)
                rank_lines = [ln for ln in page.lines() if ln.rank is not None or ln.replica in own]
                if visible := prompts.shown(rank_lines):  # the debugger's own lines open its prompt
                    view.append(visible)
                prompts.poll(rank_lines, status)
                if not status.is_terminal and (usage := feed.poll()) is not None:
                    view.usage(usage)
                if not status.is_terminal and (incident := diagnoses.poll()) is not None:
                    view.diagnosis(incident)
                if status.phase is JobPhase.RUNNING and (shown := bar.poll(status)) is not None:
                    running = True
                    view.progress(*shown)
            if running:  # an ended job has no bar (nothing stale); its sparkline stays
                view.progress(None, bar.html(None))
            story = job.failure(status)
            if story is not None and story.replica:
                view.failure(story, list(job.logs(story.replica, tail=SUMMARY_LINES)))
            return status, story
        except KeyboardInterrupt:
            if cancel_on_interrupt:
                view.update(job.cancel())
                print(f"job {job.id} cancelled")
            else:
                print(
                    f"stopped following; job {job.id} keeps running. "
                    f"Cancel it with: %distrun cancel {job.id}   (or use --cancel-on-interrupt)"
                )
            return None, None
        finally:
            view.close()

    # -- the line magic --------------------------------------------------------------------
    def _line(self, line: str) -> None:
        try:
            argv = shlex.split(line)
            if argv[:1] == ["load"]:  # into this kernel: not a subcommand of the CLI
                from .values import load_command

                return load_command(argv[1:], self.shell.user_ns if self.shell else {}, print)
            _run_command(argv, print)
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
    from ..commands import run_subcommand

    run_subcommand(argv, out, command="%distrun")
