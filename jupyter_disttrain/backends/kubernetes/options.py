"""The Kubernetes knobs of a job (``spec.options``), parsed and checked before anything runs.

The magic hands flags over as strings or lists of strings; every bad value is refused here with
a one-line error that names the flag and shows a good value.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from typing import Any

from ...model.errors import InvalidSpecError
from ...model.flags import check_values, duration_seconds, group_access_option, option
from ...monitoring.guard import GuardOptions
from ..warm.options import cold_option, keep_warm_option

FLAVORS = ("job", "pytorchjob", "t9k")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# Kubernetes resource.Quantity: a decimal number with an optional binary/decimal suffix.
_QUANTITY = re.compile(r"(?P<num>[0-9]+(\.[0-9]+)?|\.[0-9]+)(?P<unit>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?")
_UNITS = {
    None: 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
# RFC 1123 subdomain (namespaces are labels, service accounts and priority classes subdomains).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}\Z)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# Label keys: optional DNS-subdomain prefix, then a name of up to 63 characters; values up to 63.
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}")
_LABEL_VALUE = re.compile(rf"({_LABEL_NAME})?")
LABEL_VALUE_MAX = 63
_VERSION = re.compile(r"^v?(\d+)\.(\d+)")
DEFAULT_PENDING_TIMEOUT = 900.0  # seconds a job may wait for all its pods to start


def parse_quantity(text: str, flag: str) -> float:
    """Return the value of a Kubernetes quantity (``"16Gi"`` → bytes), or raise naming ``flag``."""
    m = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise InvalidSpecError(
            f"{flag} {text!r} is not a Kubernetes quantity; write e.g. '16Gi', '512Mi' or '4'"
        )
    return float(m.group("num")) * _UNITS[m.group("unit")]


def parse_version(text: str) -> tuple[int, int]:
    """``"1.33"``, ``"v1.33.4"`` or ``"1.33+"`` → ``(1, 33)``."""
    m = _VERSION.match(str(text))
    if not m:
        raise InvalidSpecError(f"k8s_version {text!r} is not a Kubernetes version; write e.g. '1.33'")
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class KubeOptions(GuardOptions):
    """The Kubernetes backend's options (``spec.options``), validated. Every field is optional;
    ``None`` means "decide for me". The flags of ``%%distrun`` and ``jupyter disttrain run`` are
    generated from the fields' ``option`` metadata; a flag's text is parsed by ``parse_options``.
    The stall and idle guard's (``GuardOptions``) are every guarded backend's: the Jupyter
    server guards a Kubernetes job (``jobs/guard.py``)."""

    shm_size: str | None = option(help="size of /dev/shm (a Memory emptyDir), e.g. 16Gi")
    node_selector: dict[str, str] = option(
        {}, repeat=True, metavar="KEY=VALUE", help="schedule on nodes with this label (repeatable)"
    )
    tolerations: list[dict[str, str]] = option(
        [],
        name="--toleration",
        repeat=True,
        metavar="KEY[=VALUE]:EFFECT",
        help="tolerate a taint (repeatable)",
    )
    namespace: str | None = option(help="namespace (default: the notebook's)")
    service_account: str | None = option(help="service account of the pods")
    priority_class: str | None = option(help="priority class of the pods")
    queue: str | None = option(help="scheduling queue (Kueue's queue-name label; T9k's queue)")
    flavor: str | None = option(choices=FLAVORS, help="workload kind (default: detected)")
    colocate: bool = option(
        False, switch=True, help="run every pod on the notebook pod's node (to share a ReadWriteOnce PVC)"
    )
    run_as_root: bool = option(
        False,
        switch=True,
        help="run the pods as root instead of inheriting the notebook pod's securityContext",
    )
    group_access: bool = group_access_option()
    pending_timeout: float = option(
        DEFAULT_PENDING_TIMEOUT,
        metavar="DURATION",
        help="fail the job when its pods have not all started after this long (default 15m; 0: wait)",
    )
    keep_warm: float | None = keep_warm_option()
    cold: bool = cold_option()
    k8s_version: tuple[int, int] | None = None  # the cluster's, for manifests without a cluster


_KNOWN = tuple(f.name for f in fields(KubeOptions))


def parse_options(options: dict[str, Any], other: str | None = None) -> KubeOptions:
    """Check ``spec.options`` for the Kubernetes backend and return them typed. ``other``: the
    backend that has an option this one does not know, named in the error."""
    unknown = sorted(set(options) - set(_KNOWN))
    if unknown:
        where = f"it is a {other.capitalize()} option: add --backend {other}" if other else None
        raise InvalidSpecError(
            f"unknown Kubernetes option {unknown[0]!r}; {where or 'the options are: ' + ', '.join(_KNOWN)}"
        )
    flavor = _opt_str(options, "flavor")
    if flavor is not None and flavor not in FLAVORS:
        raise InvalidSpecError(f"--flavor {flavor!r}: choose one of {', '.join(FLAVORS)}")
    namespace = _opt_str(options, "namespace")
    if namespace is not None and not _DNS_LABEL.fullmatch(namespace):
        raise InvalidSpecError(f"--namespace {namespace!r} is not a namespace name (lower-case, digits, '-')")
    shm = _opt_str(options, "shm_size")
    if shm is not None:
        parse_quantity(shm, "--shm-size")
    names = {}
    for key in ("service_account", "priority_class", "queue"):
        value = _opt_str(options, key)
        if value is not None and not _DNS_SUBDOMAIN.fullmatch(value):
            flag = "--" + key.replace("_", "-")
            raise InvalidSpecError(
                f"{flag} {value!r} is not a Kubernetes object name (lower-case, digits, '-', '.')"
            )
        names[key] = value
    _check_queue(names["queue"])
    version = options.get("k8s_version")
    guarded = check_values(
        GuardOptions, {f.name: options[f.name] for f in fields(GuardOptions) if f.name in options}
    )
    return KubeOptions(
        **guarded,
        flavor=flavor,
        namespace=namespace,
        shm_size=shm,
        node_selector=_node_selector(options.get("node_selector")),
        tolerations=[_toleration(t) for t in _as_list(options.get("tolerations"), "--toleration")],
        service_account=names["service_account"],
        priority_class=names["priority_class"],
        queue=names["queue"],
        k8s_version=parse_version(version) if version else None,
        colocate=_opt_bool(options, "colocate"),
        run_as_root=_opt_bool(options, "run_as_root"),
        group_access=_opt_bool(options, "group_access"),
        pending_timeout=parse_duration(options.get("pending_timeout"), "--pending-timeout"),
        keep_warm=_keep_warm(options.get("keep_warm")),
        cold=_opt_bool(options, "cold"),
    )


# The default of --keep-warm (c.DistTrainApp.keep_warm exports it to the kernels it starts).
KEEP_WARM_ENV = "DISTTRAIN_KEEP_WARM"


def _keep_warm(value: Any) -> float | None:
    """``--keep-warm``, else ``$DISTTRAIN_KEEP_WARM``; None (off, the default: kept GPUs cost
    money) or 0 keep nothing."""
    if value in (None, ""):
        value = os.environ.get(KEEP_WARM_ENV) or None
        flag = f"${KEEP_WARM_ENV}"
    else:
        flag = "--keep-warm"
    seconds = None if value is None else duration_seconds(value, flag, "off")
    return seconds or None


def _check_queue(queue: str | None) -> None:
    """A queue name is also the value of Kueue's label on the workload: at most 63 characters
    (the API server refuses a longer one only at submit, with a 422)."""
    if queue is not None and len(queue) > LABEL_VALUE_MAX:
        raise InvalidSpecError(
            f"--queue {queue[:20]}...: {len(queue)} characters, over the {LABEL_VALUE_MAX} of a label value "
            "(Kueue's kueue.x-k8s.io/queue-name); name a queue of at most 63 characters"
        )


def parse_duration(value: Any, flag: str) -> float:
    """``"15m"``, ``"90s"``, ``"1h"``, ``"600"`` or a number → seconds (``None``: the default)."""
    if value is None or value == "":
        return DEFAULT_PENDING_TIMEOUT
    return duration_seconds(value, flag)


def _opt_bool(options: dict[str, Any], key: str) -> bool:
    value = options.get(key, False)
    if not isinstance(value, bool):
        raise InvalidSpecError(f"--{key.replace('_', '-')} is a switch: give it without a value")
    return value


def _opt_str(options: dict[str, Any], key: str) -> str | None:
    value = options.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidSpecError(f"--{key.replace('_', '-')} takes one text value, not {value!r}")
    return value


def _as_list(value: Any, flag: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise InvalidSpecError(f"{flag} takes text values, not {value!r}")


def _node_selector(value: Any) -> dict[str, str]:
    """Accept ``{"k": "v"}`` or ``["k=v", "k2=v2"]`` (repeated flags, or one flag with commas)."""
    pairs: list[tuple[str, str]] = []
    if isinstance(value, dict):
        pairs = [(str(k), str(v)) for k, v in value.items()]
    else:
        for item in _as_list(value, "--node-selector"):
            for part in filter(None, item.split(",")):
                key, sep, val = part.partition("=")
                if not sep:
                    raise InvalidSpecError(f"--node-selector {part!r}: write KEY=VALUE, e.g. gpu-type=a100")
                pairs.append((key.strip(), val.strip()))
    for key, val in pairs:
        if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(val):
            raise InvalidSpecError(
                f"--node-selector {key}={val}: not a valid label key/value (e.g. gpu-type=a100)"
            )
    return dict(pairs)


def _toleration(text: str) -> dict[str, str]:
    """``key[=value]:Effect`` → a Kubernetes toleration (Equal with a value, Exists without)."""
    spec, sep, effect = text.rpartition(":")
    if not sep or not spec or effect not in TAINT_EFFECTS:
        raise InvalidSpecError(
            f"--toleration {text!r}: write KEY[=VALUE]:EFFECT with EFFECT one of {', '.join(TAINT_EFFECTS)}, "
            "e.g. nvidia.com/gpu:NoSchedule"
        )
    key, eq, value = spec.partition("=")
    if not _LABEL_KEY.fullmatch(key) or (eq and not _LABEL_VALUE.fullmatch(value)):
        raise InvalidSpecError(f"--toleration {text!r}: {spec!r} is not a valid taint key[=value]")
    if eq:
        return {"key": key, "operator": "Equal", "value": value, "effect": effect}
    return {"key": key, "operator": "Exists", "effect": effect}
