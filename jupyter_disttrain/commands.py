"""The subcommands of ``jupyter disttrain`` and of the ``%distrun`` line magic.

list, status, logs, cancel, delete and run: words in, lines of text out, over the job layer
(``api``). The two front ends (``cli.py``, ``magics.py``) only say how the user typed them.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import DistTrainError, UnknownJobError
from .failure import first_line
from .specs import EXIT_TIMEOUT_HELP, OVERSUBSCRIBE_HELP, JobStatus, LogLine, iso_seconds


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
    c = sub.add_parser("cancel", help="stop a job and all its processes")
    c.add_argument("job_id", nargs="?")
    c.add_argument(
        "--orphans",
        action="store_true",
        help="instead, stop the processes of every local job whose job directory was removed while it ran",
    )
    d = sub.add_parser("delete", help="remove a job from the list (files are kept unless --purge)")
    d.add_argument("job_id")
    d.add_argument("--purge", action="store_true", help="also remove its script, logs and TensorBoard data")
    r = sub.add_parser("run", help="run a Python script as a distributed job")
    r.add_argument("file")
    r.add_argument("--gpus", type=int, default=1, help="processes per node (one per GPU)")
    r.add_argument("--nodes", type=int, default=1)
    r.add_argument("--name", default=None, help="job name (default: the file's name)")
    r.add_argument("--backend", default=None)
    r.add_argument("--max-restarts", type=int, default=0)
    r.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--oversubscribe", action="store_true", help=OVERSUBSCRIBE_HELP)
    r.add_argument("--exit-timeout", type=float, default=None, metavar="SECONDS", help=EXIT_TIMEOUT_HELP)
    r.add_argument("--detach", action="store_true", help="return at once")
    r.epilog = "Arguments after -- go to the script."
    return p


def run_subcommand(
    argv: Sequence[str], out: Callable[[str], Any] = print, command: str = "jupyter disttrain"
) -> int:
    """Run one subcommand; ``command`` is how the user types them, for the hints shown."""
    from .roots import open_store

    argv = list(argv)
    script_args: list[str] = []
    if "--" in argv:  # everything after -- belongs to the script, whatever it looks like
        script_args = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    args = _parser().parse_args(argv)
    args.script_args = script_args
    store = open_store(args.root)
    from . import api

    if args.command == "list":
        statuses = api.list_jobs(store)
        if statuses:
            out(format_table(statuses, store))
        else:
            where = " or ".join(str(r) for r in store.roots())
            out(f"no jobs in {where}; submit one with `{command} run FILE` or %%distrun in a notebook")
        return 0
    if args.command == "run":
        return _run_file(args, store, out)
    if args.command == "cancel" and (args.orphans or not args.job_id):
        return _cancel_orphans(args, out, command)
    try:
        job = api.get_job(args.job_id, store)
    except UnknownJobError as exc:
        exc.list_command = f"{command} list"
        raise
    if args.command == "status":
        out(format_status(job.status()))
    elif args.command == "logs":
        prefix = args.replica is None
        for line in job.logs(args.replica, follow=args.follow, tail=args.tail):
            out(format_line(line) if prefix else line.text)
    elif args.command == "cancel":
        status = job.cancel()
        out(f"{job.id}: {status.phase.value}")
    elif args.command == "delete":
        job.delete(purge=args.purge)
        kept = "" if args.purge else f" (files kept in {job.dir})"
        out(f"{job.id}: deleted{kept}")
    return 0


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


def _run_file(args: argparse.Namespace, store: Any, out: Callable[[str], Any]) -> int:
    from . import api

    path = Path(args.file)
    if not path.is_file():
        raise DistTrainError(f"no file {args.file!r}")
    script_args = args.script_args
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            raise DistTrainError(f"--env takes KEY=VALUE, not {item!r}")
        env[key] = value
    name = args.name or path.stem.lower().replace("_", "-")
    job = api.submit(
        path.read_text(encoding="utf-8"),
        store=store,
        gpus=args.gpus,
        nodes=args.nodes,
        name=name,
        backend=args.backend,
        args=script_args,
        env=env,
        max_restarts=args.max_restarts,
        options=_local_options(args),
    )
    out(f"job {job.id} submitted")
    if args.detach:
        return 0
    for line in job.logs(follow=True):
        if line.rank is not None:
            out(format_line(line))
    status = job.wait()
    out(format_status(status))
    return 0 if status.phase.value == "Succeeded" else 1


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


def format_table(statuses: list[JobStatus], store: Any) -> str:
    rows = [("ID", "BACKEND", "PHASE", "REPLICAS", "AGE")]
    for st in statuses:
        backend = store.read_record(st.job_id).backend
        # ready/total while it runs; once it has ended, how many replicas it had
        replicas = str(len(st.replicas)) if st.is_terminal else f"{st.replicas_ready}/{len(st.replicas)}"
        rows.append((st.job_id, backend, st.phase.value, replicas, _age(st.created)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _local_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {"oversubscribe": True} if args.oversubscribe else {}
    if args.exit_timeout is not None:
        options["exit_timeout"] = args.exit_timeout
    return options


def format_status(st: JobStatus) -> str:
    headline, _, detail = (st.message or "").partition("\n")  # e.g. the root cause's traceback
    lines = [
        f"{st.job_id}: {st.phase.value}" + (f" ({st.reason}: {headline})" if st.reason and headline else "")
    ]
    for r in st.replicas:
        extra = f" exit {r.exit_code}" if r.exit_code is not None else ""
        extra += f" {r.reason}" if r.reason else ""
        extra += f" restarts {r.restarts}" if r.restarts else ""
        lines.append(f"  {r.name:<12} {r.phase.value:<10}{extra}")
    for e in st.events[-5:]:
        lines.append(f"  {e.time} {e.type:<7} {e.reason}: {first_line(e.message)}")
    lines.extend(f"  | {ln}" for ln in detail.splitlines())
    return "\n".join(lines)
