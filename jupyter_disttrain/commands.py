"""The subcommands of ``jupyter disttrain`` and of the ``%distrun`` line magic.

list, status, logs, stack, diagnose, checkpoints, debug, cancel, delete, pools and run: words in, lines
of text out, over the job layer (``api``). The two front ends (``cli.py``, ``magics.py``) only say how the
user typed them.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .jobs.intake import choose_launcher, job_flag_classes, spec_from_flags
from .model.errors import DistTrainError, UnknownJobError
from .model.failure import first_line
from .model.flags import add_flags
from .model.progress import Progress, progress_text
from .model.specs import JobStatus, LogLine, iso_seconds, name_from
from .model.tracebacks import plain
from .monitoring.stacks import METHODS

if TYPE_CHECKING:
    from .api import CheckpointList, Failure, Incident, Job, KeptValue, PoolList
    from .jobs.manager import Listed


PROMPT_TAIL = 200  # lines of each rank's log searched for an open debugger prompt


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jupyter disttrain", description="Distributed training jobs of jupyter_disttrain."
    )
    p.add_argument(
        "--root",
        help="search this job store directory only (default: $DISTTRAIN_JOB_ROOT if set, else the nearest"
        " ./.disttrain/jobs and every job root you have used; new jobs go to the former)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every job, newest first")
    s = sub.add_parser("status", help="a job's phase, replicas and events")
    s.add_argument("job_id")
    lg = sub.add_parser("logs", help="a job's output")
    lg.add_argument("job_id")
    lg.add_argument("--replica", help="one replica (rank-0, agent-0, a pod...); default: all interleaved")
    lg.add_argument("--tail", type=int, help="start at the last N lines (per replica)")
    lg.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until the job ends")
    st = sub.add_parser(
        "stack", help="the Python stacks of every thread of a running rank (which rank is stuck?)"
    )
    st.add_argument("job_id")
    st.add_argument("--replica", help="one replica (rank-1...); default: every running replica in turn")
    st.add_argument(
        "--method",
        choices=METHODS,
        default="auto",
        help="py-spy (needs ptrace permission) or the rank's faulthandler; default: py-spy where it can",
    )
    dg = sub.add_parser(
        "diagnose",
        help="which rank of a running job is stuck, in which collective, at which cell line "
        "(every rank's Flight Recorder and stacks; kept in the job dir as an incident)",
    )
    dg.add_argument("job_id")
    c = sub.add_parser("cancel", help="stop a job and all its processes")
    c.add_argument("job_id", nargs="?")
    c.add_argument(
        "--orphans",
        action="store_true",
        help="instead, stop the processes of every local job whose job directory was removed while it ran",
    )
    ck = sub.add_parser("checkpoints", help="a job's checkpoints: step, kind, time, size, complete, path")
    ck.add_argument("job_id")
    db = sub.add_parser("debug", help="answer a rank's pdb prompt (breakpoint(), --pdb) from here")
    db.add_argument("job_id")
    db.add_argument("--replica", help="the rank at the prompt (default: the one whose prompt is open)")
    d = sub.add_parser("delete", help="remove a job from the list (files are kept unless --purge)")
    d.add_argument("job_id")
    d.add_argument("--purge", action="store_true", help="also remove its script, logs and TensorBoard data")
    pl = sub.add_parser(
        "pools", help="capacity kept warm between jobs (Slurm's warm steps): nodes, GPUs, idle, release"
    )
    pl.add_argument("action", nargs="?", choices=["release"], help="release: give the pool ID back now")
    pl.add_argument("pool_id", nargs="?", help="the pool to release (an ID of the listing)")
    pl.add_argument(
        "--force", action="store_true", help="release it even while a job runs in it (the job fails)"
    )
    r = sub.add_parser("run", help="run a Python script as a distributed job")
    r.add_argument("file")
    # The same flags as %%distrun, generated from their declarations.
    add_flags(r.add_argument, job_flag_classes())
    r.epilog = "Arguments after -- go to the script."
    return p


def run_subcommand(
    argv: Sequence[str], out: Callable[[str], Any] = print, command: str = "jupyter disttrain"
) -> int:
    """Run one subcommand; ``command`` is how the user types them, for the hints shown."""
    from .storage.store import open_store

    argv = list(argv)
    script_args: list[str] = []
    if "--" in argv:  # everything after -- belongs to the script, whatever it looks like
        script_args = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    args = _parser().parse_args(argv)
    args.script_args = script_args
    store = open_store(args.root)

    if args.command == "list":
        from .jobs.manager import manager_for

        jobs = manager_for(store).list_jobs()
        if jobs:
            out(format_table(jobs))
        else:
            where = " or ".join(str(r) for r in store.roots())
            out(f"no jobs in {where}; submit one with `{command} run FILE` or %%distrun in a notebook")
        return 0
    if args.command in _OWN_STORE:  # not of one job
        return _OWN_STORE[args.command](args, store, out, command)
    if args.command == "cancel" and (args.orphans or not args.job_id):
        return _cancel_orphans(args, out, command)
    job = job_of(args.job_id, command, store)
    if args.command == "status":
        status = job.status()
        out(format_status(status, job.failure(status), job.values(), progress=job.progress(status)))
    elif args.command == "logs":
        prefix = args.replica is None
        for line in _lines(job, args.replica, args.tail, args.follow):
            out(format_line(line) if prefix else line.text)
    elif args.command == "stack":
        return _print_stacks(job, args.replica, args.method, out)
    elif args.command == "debug":
        return _debug(job, args.replica, out)
    elif args.command == "diagnose":
        out(format_incident(job.diagnose()))
    elif args.command == "checkpoints":
        out(format_checkpoints(job.checkpoints(), command))
    elif args.command == "cancel":
        status = job.cancel()
        out(f"{job.id}: {status.phase.value}")
    elif args.command == "delete":
        job.delete(purge=args.purge)
        kept = "" if args.purge else f" (files kept in {job.dir})"
        out(f"{job.id}: deleted{kept}")
    return 0


def job_of(job_id: str, command: str, store: Any = None) -> Job:
    """The job ``job_id`` where the subcommands look (``store``, else every root), or an error
    saying how to list the jobs there are."""
    from . import api
    from .storage.store import open_store

    try:
        return api.get_job(job_id, store or open_store(None))
    except UnknownJobError as exc:
        exc.list_command = f"{command} list"
        raise


def _print_stacks(job: Any, replica: str | None, method: str, out: Callable[[str], Any]) -> int:
    """One replica's stacks; without ``replica``, each running one's (a failure says why and
    goes on to the next)."""
    if replica is not None:
        replicas = [replica]
    else:
        status = job.status()
        replicas = [r.name for r in status.replicas if not r.phase.is_terminal] or [
            r.name for r in status.replicas
        ]
    code = 0
    for name in replicas:
        try:
            dump = job.stack(name, method)
        except DistTrainError as exc:
            if replica is not None:
                raise
            out(f"==== {name}: {exc}")
            code = 1
            continue
        out(f"==== {dump.replica} ({dump.method}) ====")
        if dump.note:
            out(f"# {dump.note}")
        out(dump.text.rstrip("\n"))
    return code


def _debug(job: Job, replica: str | None, out: Callable[[str], Any]) -> int:
    """Answer the job's open prompt (``replica``'s, else the one its ranks' logs say is open)."""
    from .jobs.debug import Prompt, Prompts, answer_in_text

    prompts = Prompts()
    prompts.feed(list(job.logs(tail=PROMPT_TAIL)))
    found = prompts.open.get(replica) if replica else next(iter(prompts.open.values()), None)
    if found is None and replica is None:
        raise DistTrainError(f"no rank of job {job.id} waits in the debugger now")
    answer_in_text(job.manager, job.id, found or Prompt(replica or "", "?", replica or ""), input, out)
    return 0


def _pools(args: argparse.Namespace, store: Any, out: Callable[[str], Any], command: str) -> int:
    from . import api

    if args.action is None:
        if args.pool_id or args.force:
            raise DistTrainError(f"to release a pool: `{command} pools release ID [--force]`")
        listing = api.pools(store)
        out(format_pools(listing, command))
        return 1 if listing.errors and not listing.pools else 0
    if not args.pool_id:
        raise DistTrainError(f"which pool? `{command} pools release ID` (`{command} pools` lists them)")
    answer = api.release_pool(args.pool_id, args.force, store)
    out(f"{answer.id}: {answer.message}")
    return 0 if answer.released else 1


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    secs = int(value)
    return f"{secs // 60}m{secs % 60:02d}s" if secs >= 60 else f"{secs}s"


def format_pools(listing: PoolList, command: str) -> str:
    """A table of the pools (id, where, nodes, GPUs, jobs, idle for, releases in) and how to release one."""
    lines = [f"# {error}" for error in listing.errors]
    if not listing.pools:
        return "\n".join([*lines, "no warm pools (a warm job inside a Slurm allocation keeps one)"])
    rows = [("ID", "WHERE", "NODES", "GPUS", "JOBS", "IDLE", "RELEASES IN")]
    for p in listing.pools:
        nodes = ",".join(f"{n.host}({n.step})" for n in p.nodes)
        jobs = ",".join(p.jobs) or "-"
        rows.append(
            (p.id, p.place, nodes, str(p.accelerators), jobs, _seconds(p.idle_for), _seconds(p.releases_in))
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.append(f"release one now with `{command} pools release ID` (idle pools release themselves)")
    return "\n".join(lines)


def _cancel_orphans(args: argparse.Namespace, out: Callable[[str], Any], command: str) -> int:
    if not args.orphans or args.job_id:
        raise DistTrainError(
            f"give a job id, or --orphans alone: `{command} cancel ID` or `{command} cancel --orphans`"
        )
    from . import api

    stopped = api.cancel_orphans()
    for job_dir, count in sorted(stopped.items()):
        out(f"{job_dir}: stopped {count} process(es) of a job whose directory is gone")
    if not stopped:
        out("no orphaned job processes")
    return 0


def _run_file(args: argparse.Namespace, store: Any, out: Callable[[str], Any], command: str) -> int:
    from . import api
    from .jobs import values as jobvalues
    from .jobs.debug import Prompts, answer_in_text
    from .packaging.pitfalls import check_pitfalls

    path = Path(args.file)
    if not path.is_file():
        raise DistTrainError(f"no file {args.file!r}")
    source = path.read_text(encoding="utf-8")
    spec = spec_from_flags(args, args.script_args, default_name=name_from(path.stem))
    if chosen := choose_launcher(spec, bool(args.launcher), source):
        out(f"# {chosen}")
    ignore = {"*"} if "all" in args.no_check else set(args.no_check)
    for pit in check_pitfalls(source, ignore, target=api.job_target(spec)):
        out(f"warning: {path.name}:{pit.line}: {pit.message}  [silence: --no-check {pit.code}]")
    if args.dry_run:
        info = api.dryrun(source, spec, store=store)
        for said in jobvalues.describe(spec):
            out(f"# {said}")
        out(f"# ---- launch request ({info.backend} backend, job {info.job_id}, not launched) ----")
        out(info.text)
        return 0
    job = api.submit(source, spec, store=store)
    out(f"job {job.id} submitted")
    if args.detach:
        return 0
    prompts = Prompts()  # breakpoint() in a rank: answered from this terminal
    try:
        for page in job.follow():
            for line in page.lines():
                if line.rank is not None:
                    out(format_line(line))
            for prompt in prompts.feed(page.lines())[0]:
                answer_in_text(job.manager, job.id, prompt, input, out)
    except KeyboardInterrupt:
        if not args.cancel_on_interrupt:
            out(f"stopped following; the job runs on (cancel it with: {command} cancel {job.id})")
            raise
        out(f"{job.id}: {job.cancel().phase.value}")
        return 130
    out(format_status(page.status, job.failure(page.status), job.values()))  # the last page's: the job's end
    if job.values() and page.status.phase.value == "Succeeded":
        out(f"load the values with jupyter_disttrain.get_job({job.id!r}).result() or %distrun load {job.id}")
    return 0 if page.status.phase.value == "Succeeded" else 1


_OWN_STORE = {"run": _run_file, "pools": _pools}


def _lines(job: Job, replica: str | None, tail: int | None, follow: bool) -> Iterator[LogLine]:
    """The job's output there is now, or (``follow``) as it is written until the job ends."""
    if not follow:
        return job.logs(replica, tail=tail)
    return (line for page in job.follow(replica, tail=tail) for line in page.lines())


def format_line(line: LogLine) -> str:
    who = f"rank{line.rank}" if line.rank is not None else line.replica
    return f"[{who}] {line.text}"


def _age(iso: str | None) -> str:
    if not iso:
        return "-"
    secs = max(0, int(time.time() - iso_seconds(iso)))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def format_table(jobs: list[Listed]) -> str:
    rows = [("ID", "BACKEND", "PHASE", "REPLICAS", "AGE", "PROGRESS")]
    for job in jobs:
        st = job.status
        # ready/total while it runs; once it has ended, how many replicas it had
        replicas = str(len(st.replicas)) if st.is_terminal else f"{st.replicas_ready}/{len(st.replicas)}"
        progress = progress_text(job.progress) if job.progress else ""
        rows.append((st.job_id, job.record.backend, st.phase.value, replicas, _age(st.created), progress))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _size(size: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f}{unit}"
    return f"{size}B"


def format_checkpoints(listing: CheckpointList, command: str) -> str:
    """A table of the job's checkpoints (step, kind, time, size, complete, path) and their usage."""
    if not listing.checkpoints:
        return (
            f"{listing.job_id}: no checkpoints in {listing.dir} (save them in $DISTTRAIN_CHECKPOINT_DIR, "
            "or declare them with run.checkpoint(path))"
        )
    rows = [("STEP", "KIND", "TIME", "SIZE", "COMPLETE", "PATH")]
    for c in listing.checkpoints:
        step = "-" if c.step is None else str(c.step)
        done = ("yes" if c.complete else "writing") + (" pinned" if c.pinned else "")
        rows.append((step, c.kind, c.time or "-", _size(c.size), done, c.path))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    u = listing.usage
    table.append(
        f"{u.count} checkpoint(s), {u.complete} complete, {_size(u.bytes)}; resume with "
        f"--resume {listing.job_id}:latest or :STEP"
    )
    return "\n".join(table)


def format_incident(incident: Incident) -> str:
    """A diagnosis as text: the verdict, each rank's line, where it is kept."""
    lines = [incident.verdict, ""]
    for part in incident.ranks:
        what = part.state + (f" {part.collective}" if part.collective else "")
        where = f" at {part.where}" + (f": {part.source}" if part.source else "") if part.where else ""
        lines.append(f"  {part.replica}: {what}{where}" + (f" ({part.note})" if part.note else ""))
    lines += [f"# {note}" for note in incident.notes]
    lines.append(f"(incident {incident.name}, {incident.seconds:.2f} s; its stacks are in the job's details)")
    return "\n".join(lines)


def format_status(
    st: JobStatus,
    story: Failure | None = None,
    values: Sequence[KeptValue] = (),
    *,
    progress: Progress | None = None,
) -> str:
    """The job's phase, its progress while it runs, replicas and last events; of a failed one
    (``story``: the job layer's ``Failure``), the peers the root cause stopped and its traceback
    mapped to the cells, else what the status message holds after its headline (the root
    cause's log tail); the values ``--out`` kept."""
    headline, _, detail = (st.message or "").partition("\n")
    if story is not None and story.traceback:
        detail = plain(story.traceback)
    lines = [
        f"{st.job_id}: {st.phase.value}" + (f" ({st.reason}: {headline})" if st.reason and headline else "")
    ]
    if progress is not None:
        lines.append(f"  progress: {progress_text(progress)} (from {progress.source})")
    for r in st.replicas:
        if story and (cause := story.stopped_by(r.name)):
            lines.append(f"  {r.name:<12} stopped by {cause}")
            continue
        extra = f" exit {r.exit_code}" if r.exit_code is not None else ""
        extra += f" {r.reason}" if r.reason else ""
        extra += f" restarts {r.restarts}" if r.restarts else ""
        lines.append(f"  {r.name:<12} {r.phase.value:<10}{extra}")
    for e in st.events[-5:]:
        lines.append(f"  {e.time} {e.type:<7} {e.reason}: {first_line(e.message)}")
    lines.extend(f"  | {ln}" for ln in detail.splitlines())
    lines.extend(format_values(values))
    return "\n".join(lines)


def format_values(values: Sequence[KeptValue]) -> list[str]:
    """The values ``--out`` kept, one line each: name, rank, kind and type, size; or why not."""
    if not values:
        return []
    width = max(len(v.name) for v in values)
    lines = ["  kept values:"]
    for v in values:
        what = f"{v.kind} {v.type}, {_size(v.bytes)}" if v.refused is None else f"not kept: {v.refused}"
        lines.append(f"    {v.name:<{width}}  rank {v.rank}  {what}")
    return lines
