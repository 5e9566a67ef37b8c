"""The Slurm backend's options (``spec.options``), declared once and checked before anything runs.

The flags of ``%%distrun`` and ``jupyter disttrain run`` are generated from ``SlurmOptions``'
fields, in sbatch's own words. Every bad value is refused with a one-line error that names the
flag and shows a good value; ``parse_options`` returns them typed.

A Slurm job is supervised by the shared supervisor (``backends/agents/``), so its options begin
with the supervisor's (``--grace-period``, ``--exit-timeout``, ``--monitor-interval``: one
declaration, one flag each) and warm start's (``--cold``); the backend registry loads this
module without any backend (``backends.options_class``).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, fields
from typing import Any

from ...model.errors import InvalidSpecError
from ...model.flags import check_values, duration_seconds, option
from ..warm.options import WarmOptions, keep_warm_option
from .sbatchargs import check_value, read_option

# Slurm names: partitions, accounts, QOS, reservations (letters, digits, '_', '-', '.').
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")
# sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME = re.compile(r"(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)")
_MEM = re.compile(r"\d+[KMGT]?", re.IGNORECASE)
# sbatch --constraint: features joined by & | , and grouped by brackets; counts after '*'.
_CONSTRAINT = re.compile(r"[A-Za-z0-9_.&|,()\[\]*:!-]{1,512}")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # never in a word of the batch script: a newline ends its line

# sbatch options (by their full names: sbatchargs.py reads prefixes and short forms as sbatch
# does) the backend sets itself from a job's words, or that have flags of their own.
_OWN = {
    "nodes": "--nodes",
    "ntasks": "--gpus and --nodes",
    "ntasks-per-node": "--gpus and --nodes",
    "cpus-per-task": "--gpus (one CPU per process; more with --cpus-per-gpu)",
    "gpus": "--gpus",
    "gpus-per-node": "--gpus",
    "gres": "--gpus",
    "job-name": "--name",
    "partition": "--partition",
    "account": "--account",
    "qos": "--qos",
    "time": "--time",
    "constraint": "--constraint",
    "reservation": "--reservation",
    "mem": "--mem",
    "cpus-per-gpu": "--cpus-per-gpu",
    "exclusive": "--exclusive",
    "requeue": "--requeue",
    "no-requeue": "--requeue",
}
# What the job's own bookkeeping needs as it is: its output file, working dir and environment.
_FIXED = ("output", "error", "open-mode", "chdir", "export", "wrap", "parsable", "array", "wait")
# Options after which there is no job here for the backend to follow.
_NO_JOB = {
    "test-only": "sbatch then only tests the job, and submits nothing",
    "help": "sbatch then prints its help, and submits nothing",
    "usage": "sbatch then prints its usage, and submits nothing",
    "version": "sbatch then prints its version, and submits nothing",
    "clusters": "the job would run on another cluster, where the backend cannot follow it",
}


def _cpus_per_gpu(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--cpus-per-gpu takes a whole number of at least 1, not {text!r}")
    return int(text)


@dataclass(frozen=True)
class SlurmOptions(WarmOptions):
    """The Slurm backend's options; ``None`` leaves the choice to the cluster's defaults."""

    partition: str | None = option(
        metavar="NAME", help="slurm: partition (sbatch --partition; default: the cluster's)"
    )
    account: str | None = option(help="slurm: account the job is charged to (sbatch --account)")
    qos: str | None = option(help="slurm: quality of service (sbatch --qos)")
    time: str | None = option(
        metavar="TIME", help="slurm: time limit: minutes, HH:MM:SS or D-HH:MM:SS (sbatch --time)"
    )
    constraint: str | None = option(
        metavar="FEATURES", help="slurm: node features the job needs, e.g. a100 (sbatch --constraint)"
    )
    reservation: str | None = option(help="slurm: reservation to run in (sbatch --reservation)")
    mem: str | None = option(metavar="SIZE", help="slurm: memory per node, e.g. 64G (sbatch --mem)")
    cpus_per_gpu: int | None = option(
        parse=_cpus_per_gpu, metavar="N", help="slurm: CPUs per GPU (sbatch --cpus-per-gpu)"
    )
    exclusive: bool = option(False, switch=True, help="slurm: whole nodes, shared with no other job")
    requeue: bool = option(False, switch=True, help="slurm: run again after preemption or a node failure")
    batch: bool = option(False, switch=True, help="slurm: a batch job (sbatch) even inside an allocation")
    keep_warm: float | None = keep_warm_option()
    sbatch_options: list[str] = option(
        [],
        name="--sbatch-option",
        repeat=True,
        metavar="OPTION",
        help="slurm: any other sbatch option, written --sbatch-option=--mail-type=END (repeatable)",
    )


NAMES = frozenset(f.name for f in fields(SlurmOptions))
# The options that shape a new batch job: meaningless for a job step inside an allocation.
BATCH_ONLY = (
    "partition",
    "account",
    "qos",
    "time",
    "constraint",
    "reservation",
    "mem",
    "exclusive",
    "requeue",
)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def parse_options(options: dict[str, Any], other: str | None = None) -> SlurmOptions:
    """Check ``spec.options`` for the Slurm backend and return them typed. ``other``: the
    backend that has an option this one does not know, named in the error."""
    unknown = sorted(set(options) - NAMES)
    if unknown:
        where = f"it is a {other.capitalize()} option: add --backend {other}" if other else None
        raise InvalidSpecError(
            f"the slurm backend has no option {flag(unknown[0])}; "
            + (where or "its options are: " + ", ".join(flag(f.name) for f in fields(SlurmOptions)))
        )
    shared = {f.name for f in fields(WarmOptions)}
    values: dict[str, Any] = check_values(WarmOptions, {k: options[k] for k in shared & set(options)})
    keep = options.get("keep_warm")
    values["keep_warm"] = None if keep in (None, "") else duration_seconds(keep, "--keep-warm", "none")
    for key in ("partition", "account", "qos", "reservation"):
        values[key] = _name(options.get(key), key)
    values["time"] = _text(options.get("time"), "time")
    if values["time"] is not None:
        time_seconds(values["time"])
    values["constraint"] = _pattern(options.get("constraint"), "constraint", _CONSTRAINT, "a100&ib")
    values["mem"] = _pattern(options.get("mem"), "mem", _MEM, "64G")
    cpus = options.get("cpus_per_gpu")
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1):
        raise InvalidSpecError(f"--cpus-per-gpu takes a whole number of at least 1, not {cpus!r}")
    values["cpus_per_gpu"] = cpus
    for key in ("exclusive", "requeue", "batch"):
        value = options.get(key, False)
        if not isinstance(value, bool):
            raise InvalidSpecError(f"{flag(key)} is a switch: give it without a value")
        values[key] = value
    values["sbatch_options"] = [check_sbatch_option(o) for o in _texts(options.get("sbatch_options"))]
    return SlurmOptions(**values)


def time_seconds(text: str) -> int | None:
    """Seconds of an sbatch ``--time`` (None: no limit), or a one-line error naming the flag."""
    if text.lower() in ("infinite", "unlimited"):
        return None
    m = _TIME.fullmatch(text)
    if not m:
        raise InvalidSpecError(
            f"--time {text!r} is not a Slurm time limit; write minutes (90), HH:MM:SS (1:30:00) "
            "or D-HH:MM:SS (2-00:00:00)"
        )
    days, hours, d_min, d_sec, minutes, m_sec, h_sec = (int(g) if g else 0 for g in m.groups())
    if m.group(1) is not None:  # D-HH[:MM[:SS]]
        return ((days * 24 + hours) * 60 + d_min) * 60 + d_sec
    if m.group(7) is not None:  # HH:MM:SS
        return (minutes * 60 + m_sec) * 60 + h_sec
    return minutes * 60 + m_sec  # MM or MM:SS


def check_sbatch_option(text: str) -> str:
    """One pass-through sbatch option as sbatch reads it, written ``--name=value`` (its form on
    the command line and in the batch script's ``#SBATCH`` lines), or a one-line refusal."""
    if CONTROL.search(text):
        raise InvalidSpecError(
            f"--sbatch-option {text!r}: give one sbatch option on one line, e.g. "
            "--sbatch-option=--mail-type=END"
        )
    option = read_option(text)
    name = option.name
    if name in _OWN:
        own = _OWN[name]
        how = f"use {own}" if own.startswith("--") and " " not in own else f"the backend sets it from {own}"
        raise InvalidSpecError(f"--sbatch-option {text} is sbatch's --{name}: {how}")
    if name in _FIXED:
        raise InvalidSpecError(
            f"--sbatch-option {text} is sbatch's --{name}, which the backend sets itself (the job's "
            "output, working dir and environment live in its job dir)"
        )
    if name in _NO_JOB:
        raise InvalidSpecError(f"--sbatch-option {text}: {_NO_JOB[name]}")
    check_value(text, option)
    return option.text


def _text(value: Any, key: str) -> str | None:
    if isinstance(value, str) or value is None:
        return value or None
    raise InvalidSpecError(f"{flag(key)} takes one text value, not {value!r}")


def _texts(value: Any) -> list[str]:
    values = [value] if isinstance(value, str) else value if isinstance(value, (list, tuple)) else None
    if value is None:
        return []
    if values is None or not all(isinstance(v, str) for v in values):
        raise InvalidSpecError(f"--sbatch-option takes text values, not {value!r}")
    return list(values)


def _name(value: Any, key: str) -> str | None:
    text = _text(value, key)
    if text is None:
        return None
    names = text.split(",") if key == "partition" else [text]  # sbatch takes a list of partitions
    if not all(_NAME.fullmatch(n) for n in names):
        raise InvalidSpecError(f"{flag(key)} {text!r} is not a Slurm name (letters, digits, '_', '-', '.')")
    return text


def _pattern(value: Any, key: str, pattern: re.Pattern[str], example: str) -> str | None:
    text = _text(value, key)
    if text is not None and not pattern.fullmatch(text):
        raise InvalidSpecError(
            f"{flag(key)} {text!r} is not what sbatch takes; write e.g. {flag(key)} {example}"
        )
    return text
