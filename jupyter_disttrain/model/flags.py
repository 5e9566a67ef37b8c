"""Job flags declared once, in types: ``%%distrun`` and ``jupyter disttrain run`` are generated from them.

A backend declares its options as a dataclass whose fields carry ``option(help=...)``
metadata; the words every job has (``--gpus``, ``--env``...) and the ways to run one
(``--dry-run``, ``--detach``...) are declared here the same way. ``add_flags`` puts them on an
argparse parser (the magic's and the CLI's), ``job_fields`` turns parsed flags into the
JobSpec words and ``spec.options`` (what the REST submit takes as JSON), so the same flags give
the same job whichever front end read them.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..launchers.names import NAMES as LAUNCHERS
from .errors import InvalidSpecError
from .specs import ACCELERATORS, JobSpec


@dataclass(frozen=True)
class Flag:
    """How one field is typed on a command line."""

    help: str
    name: str = ""  # --the-field-name unless given
    metavar: str | None = None
    repeat: bool = False  # may be given several times; the values make a list
    switch: bool = False  # takes no value: present means true
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], Any] | None = None  # text -> value, raising ArgumentTypeError


def option(default: Any = None, *, check: Callable[[Any, str], Any] | None = None, **flag: Any) -> Any:
    """A dataclass field that is also a flag (``help=`` and the other ``Flag`` fields).

    ``check(value, name)`` refuses a bad value with a one-line error naming it (``check_values``)."""
    meta: dict[str, Any] = {"flag": Flag(**flag)}
    if check is not None:
        meta["check"] = check
    if isinstance(default, (list, dict)):
        return field(default_factory=type(default), metadata=meta)
    return field(default=default, metadata=meta)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(s|m|h)?")


def duration_seconds(value: Any, flag: str, zero: str = "no limit") -> float:
    """``"15m"``, ``"90s"``, ``"1h"``, ``"600"`` or a number of seconds → seconds, or a one-line
    error naming ``flag`` (``zero``: what 0 means there)."""
    m = _DURATION.fullmatch(str(value)) if isinstance(value, (str, int, float)) else None
    if not m or isinstance(value, bool):
        raise InvalidSpecError(
            f"{flag} {value!r} is not a duration; write e.g. '15m', '90s' or '1h' (0: {zero})"
        )
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2) or "s"]


# The option of the backends whose job dirs a group may share (each checks it is a switch; the
# others refuse it); the store reads it from the spec as it makes the job dir.
GROUP_ACCESS = "group_access"


def group_access_option(check: Callable[[Any, str], Any] | None = None) -> Any:
    """``--group-access``, one flag however many backends declare it."""
    return option(
        False,
        switch=True,
        check=check,
        help="let the job directory's group read (never write) the job's files (job dir 0750, not "
        "0700): e.g. teammates on a shared PVC; on Kubernetes the job dir must be on a PVC",
    )


def check_values(cls: type, values: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``values`` as the ``check`` of each field of dataclass ``cls`` returns them (errors name
    the field as ``where`` + its name: ``spec.options.grace_period`` over REST)."""
    checked = dict(values)
    for f in dataclasses.fields(cls):
        check = f.metadata.get("check")
        if check is not None and f.name in values:
            checked[f.name] = check(values[f.name], where + f.name)
    return checked


def flags_of(cls: type) -> Iterator[tuple[str, Flag, Any]]:
    """(field name, flag, default) of every flag field of dataclass ``cls``."""
    for f in dataclasses.fields(cls):
        flag = f.metadata.get("flag")
        if flag is not None:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            yield f.name, flag, default


def flag_name(name: str, flag: Flag) -> str:
    return flag.name or "--" + name.replace("_", "-")


def add_flags(add: Callable[..., Any], classes: Sequence[type]) -> None:
    """Declare the flags of ``classes`` through ``add`` (argparse's ``add_argument``, or
    IPython's ``argument`` decorator applied later); each field's value lands in ``dest``=its name.

    A flag that several classes declare (two backends' ``--grace-period``) is declared once, by
    the first: its value lands in the one ``dest`` that each class's ``given`` reads."""
    declared: set[str] = set()
    for cls in classes:
        for name, flag, default in flags_of(cls):
            if flag_name(name, flag) in declared:
                continue
            declared.add(flag_name(name, flag))
            kwargs: dict[str, Any] = {"dest": name, "help": flag.help}
            if flag.switch:
                kwargs["action"] = "store_true"
            else:
                kwargs["default"] = [] if flag.repeat else (None if default is None else default)
                if flag.repeat:
                    kwargs["action"] = "append"
                for key in ("metavar", "choices"):
                    if getattr(flag, key) is not None:
                        kwargs[key] = getattr(flag, key)
                if flag.parse is not None:
                    kwargs["type"] = flag.parse
            add(flag_name(name, flag), **kwargs)


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The values of ``cls``'s flags that were given (not left at their default)."""
    out = {}
    for name, _, default in flags_of(cls):
        value = getattr(args, name, default)
        if value != default and value not in (None, [], {}):
            out[name] = value
    return out


# -- the flags every job and every front end has -----------------------------------------------
def _count(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text) if text.strip().isdigit() else 0
        if value < 1:
            raise argparse.ArgumentTypeError(
                f"{flag} takes a whole number of at least 1 (e.g. {flag} 2), not {text!r}"
            )
        return value

    return parse


def _non_negative(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"--max-restarts takes a whole number of 0 or more, not {text!r}")
    return int(text)


def _keep(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(
            f"--keep-checkpoints takes a whole number of 0 (keep all) or more, not {text!r}"
        )
    return int(text)


def key_value(flag: str) -> Callable[[str], tuple[str, str]]:
    def parse(text: str) -> tuple[str, str]:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(
                f"{flag} takes KEY=VALUE (e.g. {flag} NCCL_DEBUG=INFO), not {text!r}"
            )
        return key, value

    return parse


@dataclass
class JobWords:
    """The words of every job, in torchrun's terms where it has one (JobSpec fields)."""

    gpus: int = option(
        JobSpec.nproc_per_node,
        parse=_count("--gpus"),
        help="processes per node: one per GPU, or CPU processes (gloo) where there is no GPU",
    )
    nodes: int = option(
        JobSpec.nodes,
        parse=_count("--nodes"),
        help="number of nodes (torchrun agents); several on one machine for the local backend",
    )
    name: str | None = option(
        help="job name: lower-case letters, digits and '-' (Kubernetes: starting with a letter)"
    )
    backend: str | None = option(
        help="local (default), kubernetes (default inside a pod, with the kubernetes client installed) "
        "or slurm (default inside a Slurm allocation of several nodes)"
    )
    launcher: str | None = option(
        choices=LAUNCHERS,
        help="how the processes are laid out: torchrun (default), deepspeed (default when the cell "
        "calls deepspeed.initialize), mxnet (parameter servers: --servers, --workers), horovod",
    )
    max_restarts: int = option(
        JobSpec.max_restarts,
        parse=_non_negative,
        help="restarts on failure (local: torchrun --max-restarts; Kubernetes: the backoff limit)",
    )
    resume: str | None = option(
        metavar="JOB_ID[:STEP|latest]",
        help="start from a job's checkpoint (default latest: its newest complete one); the processes "
        "get its path in $DISTTRAIN_RESUME_FROM",
    )
    keep_checkpoints: int = option(
        JobSpec.keep_checkpoints,
        parse=_keep,
        metavar="N",
        help="keep the newest N complete checkpoints of $DISTTRAIN_CHECKPOINT_DIR, delete older ones "
        "(0: keep all)",
    )
    env: list[tuple[str, str]] = option(
        [],
        repeat=True,
        metavar="KEY=VALUE",
        parse=key_value("--env"),
        help="environment variable for the training processes (repeatable)",
    )
    accelerator: str = option(
        JobSpec.accelerator, choices=ACCELERATORS, help="cpu forces CPU processes even where GPUs exist"
    )
    image: str | None = option(help="container image (default: the notebook pod's own image)")
    pvc: list[str] = option(
        [],
        repeat=True,
        metavar="CLAIM:PATH[:ro]",
        help="mount a PVC in every pod (repeatable; default: the notebook pod's PVC mounts)",
    )
    cpu: str | None = option(help="CPU request and limit per pod, e.g. 8")
    memory: str | None = option(help="memory request and limit per pod, e.g. 64Gi")


def _names(flag: str) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = next((n for n in names if not n.isidentifier()), None)
        if not names or bad is not None:
            raise argparse.ArgumentTypeError(
                f"{flag} takes variable names, comma-separated (e.g. {flag} model,losses), not {text!r}"
            )
        return names

    return parse


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``500MB``, ``2GiB``, ``500M``, ``4096``: a size in bytes, at least 1 (K, M, G: powers of
    1024, as ``KiB``; ``KB``, ``MB``, ``GB``: of 1000)."""
    m = _SIZE.fullmatch(text)
    size = 0
    if m is not None:
        unit = (m.group(2) or "B").upper()
        base = 1000 if unit.endswith("B") and "I" not in unit else 1024  # KB, MB, GB: decimal
        scale = 1 if unit == "B" else base ** ("KMG".index(unit[0]) + 1)
        size = int(float(m.group(1)) * scale)
    if size < 1:
        raise argparse.ArgumentTypeError(f"--out-limit takes a size such as 500MB or 2GiB, not {text!r}")
    return size


@dataclass
class KernelWords:
    """What comes back into the kernel: the cell's values, and a rank's debugger (JobSpec fields)."""

    out: list[list[str]] = option(
        [],
        repeat=True,
        metavar="NAMES",
        parse=_names("--out"),
        help="variables to bring back into the kernel when the job succeeds, as rank 0 left them "
        "(comma-separated; modules and optimizers come back as the cell's classes with their state)",
    )
    out_all: list[list[str]] = option(
        [],
        repeat=True,
        metavar="NAMES",
        parse=_names("--out-all"),
        help="variables to bring back from every rank: each a list by rank",
    )
    out_limit: int | None = option(
        parse=parse_size,
        metavar="SIZE",
        help="at most this much of --out values per rank (default 1GiB); a value past it is named, not kept",
    )
    pdb: bool = option(
        switch=True,
        help="a rank that fails opens a pdb prompt (post-mortem) below the cell: the first to fail",
    )
    debug_timeout: int | None = option(
        parse=_count("--debug-timeout"),
        metavar="SECONDS",
        help="a rank's debugger prompt with no answer for this long goes on by itself (default 600)",
    )


@dataclass
class RunWords:
    """How a front end runs a job (not part of the job)."""

    dry_run: bool = option(switch=True, help="print the script and the exact launch request; run nothing")
    detach: bool = option(switch=True, help="return at once; follow later with the logs command and --follow")
    cancel_on_interrupt: bool = option(
        switch=True,
        help="interrupting (Ctrl-C, the stop button) cancels the job; by default it only stops following",
    )
    no_check: list[str] = option(
        [], repeat=True, metavar="CODE", help="silence one DDP pitfall check (repeatable), or 'all'"
    )
