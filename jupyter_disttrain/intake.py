"""Taking in a job's spec from JSON (the REST submit), and the checks of log-read arguments.

Each field is checked against its type in ``JobSpec``, so a wrong one is refused with a
message that names it (a 400 over REST); then ``JobSpec.validate``. The words users type
(``gpus=2, nodes=1``) are taken in by ``manager.spec_from_words``.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Any

from .backends import options_class
from .errors import InvalidSpecError
from .flags import check_values
from .specs import JobSpec, Volume

# Replica names come from log file stems and pod names: letters, digits, '.', '_', '-'.
_REPLICA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
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
    if not _REPLICA.match(replica) or ".." in replica:
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
