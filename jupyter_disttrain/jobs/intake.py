"""Taking in a job's spec: from the words users use, from flags, from JSON (the REST submit).

- ``spec_from_words`` (``gpus=2, nodes=1``: the Python API) and ``spec_from_flags`` (the flags of
  ``job_flag_classes``, whichever front end parsed them: ``%%distrun``, ``jupyter disttrain
  run``); the flags are every registered backend's and launcher's options besides the job's
  own words, and a launcher's option given alone chooses that launcher (``choose_launcher``
  picks one the script needs);
- ``spec_from_json``: each field is checked against its type in ``JobSpec`` and the options as
  their backend declares them, so a wrong one is refused with a message that names it (a 400
  over REST); then ``JobSpec.validate``;
- the checks of log-read arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import re
import types
import typing
from collections.abc import Sequence
from typing import Any

from .. import backends, launchers
from ..backends import default_backend_name, options_class
from ..launchers.calls import detect
from ..model.errors import InvalidSpecError
from ..model.flags import JobWords, KernelWords, RunWords, check_values, given
from ..model.specs import JobSpec, Volume

# Replica names come from log file stems and pod names: letters, digits, '.', '_', '-'.
_REPLICA = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(JobSpec))
MAX_LOG_LIMIT = 10_000


def _fits(value: Any, hint: Any) -> bool:
    """Whether JSON ``value`` has the shape of type ``hint`` (a JobSpec field's annotation)."""
    if hint is Any:
        return True
    origin, params = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, p) for p in params)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_fits(v, params[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            _fits(k, params[0]) and _fits(v, params[1]) for k, v in value.items()
        )
    if dataclasses.is_dataclass(hint):
        return isinstance(value, dict) and check_fields(hint, value, "") is None
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint)


def check_fields(cls: Any, data: dict[str, Any], where: str) -> str | None:
    """The first field of ``data`` whose value does not fit dataclass ``cls``, as a message."""
    hints = typing.get_type_hints(cls)
    for name, value in data.items():
        if name in hints and not _fits(value, hints[name]):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            return f"{where}{name} must be {_describe(hints[name])}, not {shown}"
    return None


def _describe(hint: Any) -> str:
    names = {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}
    if hint in names:
        return names[hint]
    origin, params = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if p is type(None) else _describe(p) for p in params)
    if origin is list:
        return f"a list of {_describe(params[0]).removeprefix('a ')}s"
    if origin is dict:
        return "an object of strings" if params[1] is str else "an object"
    if hint is Volume:
        return 'an object {"claim", "mount_path", "read_only", "sub_path"}'
    return getattr(hint, "__name__", str(hint))


def check_spec_data(spec_data: Any) -> None:
    """Raise ``InvalidSpecError`` naming the first ``spec`` field of the wrong type or unknown."""
    if not isinstance(spec_data, dict):
        raise InvalidSpecError('"spec" must be a JSON object of JobSpec fields')
    unknown = sorted(set(spec_data) - SPEC_FIELDS)
    if unknown:
        raise InvalidSpecError(
            f"unknown spec field(s) {', '.join(unknown)}; known: {', '.join(sorted(SPEC_FIELDS))}"
        )
    problem = check_fields(JobSpec, spec_data, "spec.")
    if problem:
        raise InvalidSpecError(problem)


def validate_replica(replica: str | None) -> str | None:
    """Return ``replica`` (None = all) if it is a plausible replica name, else raise."""
    if replica in (None, ""):
        return None
    if not _REPLICA.fullmatch(replica) or ".." in replica:
        raise InvalidSpecError(f"{replica!r} is not a replica name (names look like 'rank0' or 'worker-1')")
    return replica


def spec_from_json(spec_data: Any, default_backend: str) -> JobSpec:
    """A ``JobSpec`` from a JSON object of its fields (the REST submit's ``spec``); the options
    are checked as its backend declares them, naming the field (``spec.options.grace_period``)."""
    check_spec_data(spec_data)
    options = options_class(spec_data.get("backend") or default_backend)
    if options is not None:
        check_values(options, spec_data.get("options", {}), "spec.options.")
    try:
        spec = JobSpec.from_dict({"backend": default_backend, **spec_data})
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidSpecError(f"the spec does not fit JobSpec: {exc}") from None
    return spec.validate()


def spec_from_words(
    *,
    gpus: int = JobSpec.nproc_per_node,
    nodes: int = JobSpec.nodes,
    name: str = JobSpec.name,
    backend: str | None = None,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    max_restarts: int = JobSpec.max_restarts,
    working_dir: str | None = None,
    **fields: Any,
) -> JobSpec:
    """A ``JobSpec`` from the words users use (``gpus`` = processes per node)."""
    spec = JobSpec(
        name=name,
        nodes=nodes,
        nproc_per_node=gpus,
        backend=backend or default_backend_name(),
        args=list(args),
        env=dict(env or {}),
        max_restarts=max_restarts,
        working_dir=working_dir or os.getcwd(),
    )
    for key, value in fields.items():
        if key not in SPEC_FIELDS:
            raise InvalidSpecError(f"unknown job setting {key!r}")
        setattr(spec, key, value)
    return spec.validate()


@functools.cache
def backend_option_classes() -> tuple[type, ...]:
    """Every registered backend's options (``backends.option_classes``), looked up once per
    process: the magic declares its flags once, at import, and a cell's flags must mean what
    they meant then (the entry-point scan is also too slow for every cell)."""
    return tuple(backends.option_classes())


def job_flag_classes() -> list[type]:
    """Every flag of ``%%distrun`` and ``jupyter disttrain run``, in the order help lists them."""
    return [JobWords, *backend_option_classes(), *launchers.option_classes(), KernelWords, RunWords]


def _launcher_words(args: argparse.Namespace) -> dict[str, Any]:
    """``launcher`` and ``launcher_options`` from the flags: a launcher's own option given
    without ``--launcher`` chooses that launcher."""
    fields: dict[str, Any] = {}
    for name in launchers.NAMES:
        cls = launchers.launcher_class(name).options
        values = given(args, cls) if cls is not None else {}
        if values:
            fields["launcher_options"] = {**fields.get("launcher_options", {}), **values}
            fields.setdefault("launcher", name)
    if args.launcher:
        fields["launcher"] = args.launcher
    return fields


def choose_launcher(spec: JobSpec, explicit: bool, source: str) -> str | None:
    """Pick the launcher the script needs when none was asked for (a cell calling
    ``deepspeed.initialize`` runs under DeepSpeed's); the line saying so, or None."""
    if explicit or spec.launcher != launchers.DEFAULT:
        return None
    found = detect(source)
    if found is None or found == spec.launcher:
        return None
    spec.launcher = found
    return f"launcher {found}: the script calls {found}.initialize (choose another with --launcher)"


def spec_from_flags(args: argparse.Namespace, script_args: Sequence[str], default_name: str) -> JobSpec:
    """The job the flags of ``job_flag_classes`` ask for, whichever front end parsed them."""
    options: dict[str, Any] = {}
    for cls in backend_option_classes():
        options.update(given(args, cls))
    fields: dict[str, Any] = {"accelerator": args.accelerator, **_launcher_words(args)}
    for key in ("image", "cpu", "memory", "resume"):
        if getattr(args, key) is not None:
            fields[key] = getattr(args, key)
    if args.pvc:
        fields["volumes"] = [Volume.parse(v) for v in args.pvc]
    for key in ("out", "out_all"):  # each flag given once or more, each a comma-separated list
        fields[key] = list(dict.fromkeys(name for names in getattr(args, key) for name in names))
    for key in ("out_limit", "debug_timeout"):
        if getattr(args, key) is not None:
            fields[key] = getattr(args, key)
    fields["pdb"] = args.pdb
    return spec_from_words(
        gpus=args.gpus,
        nodes=args.nodes,
        name=args.name or default_name,
        backend=args.backend,
        args=script_args,
        env=dict(args.env),
        max_restarts=args.max_restarts,
        keep_checkpoints=args.keep_checkpoints,
        options=options,
        **fields,
    )
