"""What ``em`` accepts, checked in the caller's thread so a mistake fails at the line that made it.

Every error is one line that names the offending value and says what to write instead.
"""

from __future__ import annotations

import math
import numbers
import re
from pathlib import PurePosixPath
from typing import Any

from ..runtime.contract import RUN_NAME_PATTERN

# A closed vocabulary: the runs table and TensorBoard group metrics by type, so a typo ("valid",
# "Val") would silently start a new group instead of failing.
METRIC_TYPES = ("train", "val", "test")

_NAME = re.compile(RUN_NAME_PATTERN)
# Metric names become the second half of a ``<type>/<metric>`` TensorBoard tag.
_METRIC = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def check_name(kind: str, name: object) -> str:
    """A run or artifact name: letters, digits, ``.``, ``_``, ``-``; at most 100 characters."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"{kind} name {name!r}: use letters, digits, '.', '_' and '-' (at most 100, "
            f"starting with a letter or digit), e.g. 'mnist-lr0.1'"
        )
    return name


def check_type(type_: object) -> str:
    if type_ not in METRIC_TYPES:
        raise ValueError(f"metric type {type_!r}: use one of {', '.join(METRIC_TYPES)}")
    return str(type_)


def check_metric_name(name: object) -> str:
    if not isinstance(name, str) or not _METRIC.fullmatch(name):
        hint = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") if isinstance(name, str) else ""
        raise ValueError(
            f"metric name {name!r}: use letters, digits, '_', '.' and '-' (no '/' or spaces; "
            f"the type is the group), e.g. {hint or 'loss'!r}"
        )
    return name


def metric_value(name: str, value: Any) -> float:
    """``value`` as a float: a Python or NumPy number, or a one-element tensor or array (read
    with ``.item()``, which for a CUDA tensor waits for the GPU, as ``loss.item()`` does).
    NaN and infinities are kept: they are what the training did."""
    if hasattr(value, "item") and not isinstance(value, numbers.Number):
        try:
            value = value.item()
        except (ValueError, RuntimeError):
            raise ValueError(f"metric {name!r}: a tensor or array of one element is needed") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"metric {name!r}: value {value!r} is a {type(value).__name__}, not a number")
    return float(value)


def json_number(value: float) -> float | str:
    """JSON has no NaN or infinity: they are stored as the strings "NaN", "Infinity", "-Infinity"."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def check_step(kind: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{kind} {value!r}: an integer or None is needed")
    return int(value)


def artifact_path(name: object) -> str:
    """Where a file goes inside an artifact: a relative path that stays inside it."""
    parts = PurePosixPath(str(name)).parts if isinstance(name, str) else ()
    if not parts or parts[0] == "/" or any(p in ("..", ".") for p in parts) or "\\" in str(name):
        raise ValueError(f"artifact file name {name!r}: give a relative path inside it, e.g. 'model.pt'")
    return "/".join(parts)
