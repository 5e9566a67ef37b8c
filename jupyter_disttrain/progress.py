"""How far a job is, read off what it prints: tqdm's bar (Lightning's too) in the rank-0 log.

A plain script with a tqdm bar says ``45/100 [00:02<00:03, 17.9it/s]`` on every redraw; the log
reader keeps each ``\\r``-ended redraw as a line, so the last one is where the job stands. A
Lightning bar says ``Epoch 2:  45%|...| 45/100``: with the job's ``max_epochs`` (a captured
hyper-parameter), that is epoch 2 of ``max_epochs`` and the total covers them all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# `desc: 45%|████▌     | 45/100 [00:02<00:03, 17.9it/s, loss=0.5]` or, with no total, `45it [00:02, 17.9it/s]`
_BAR = re.compile(
    r"(?:(?P<desc>[^\r|]*?):\s*)?(?:\d+%\|[^|]*\|\s*)?"
    r"(?P<n>\d+(?:\.\d+)?[kMG]?)(?:/(?P<total>\d+(?:\.\d+)?[kMG]?))?(?:it)?"
    r" \[(?P<elapsed>[\d:]+)(?:<(?P<left>[\d:?]+))?,"
)
_EPOCH = re.compile(r"^Epoch (\d+)$")
_SCALE = {"k": 1e3, "M": 1e6, "G": 1e9}


@dataclass
class Progress:
    """A step out of a total (when known), the seconds left (when known) and where it was read."""

    step: int
    total: int | None
    eta_seconds: float | None
    source: str  # "em" | "tqdm"
    label: str | None = None  # the bar's description (tqdm's ``desc``: "Epoch 2")


def _count(text: str | None) -> int | None:
    if not text:
        return None
    scale = _SCALE.get(text[-1], 1.0)
    return int(float(text.rstrip("kMG")) * scale)


def _seconds(text: str | None) -> float | None:
    if not text or "?" in text:
        return None
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


def from_bar(line: str, hparams: Mapping[str, Any] | None = None) -> Progress | None:
    """The progress a tqdm redraw shows (None when ``line`` is none)."""
    m = _BAR.search(line.rstrip("\r\n").rsplit("\r", 1)[-1])
    if m is None:
        return None
    step, total = _count(m["n"]), _count(m["total"])
    if step is None:
        return None
    desc = (m["desc"] or "").strip() or None
    epochs = (hparams or {}).get("max_epochs")
    epoch = _EPOCH.match(desc or "")
    if epoch and total and isinstance(epochs, int) and not isinstance(epochs, bool) and epochs > 0:
        done = int(epoch[1])
        left = _seconds(m["left"])
        elapsed = _seconds(m["elapsed"])
        if left is not None and elapsed is not None and step:
            left += (epochs - done - 1) * (elapsed + left)  # the epochs still to come, at this one's pace
        return Progress(done * total + step, epochs * total, left, "tqdm", f"epoch {done + 1} of {epochs}")
    return Progress(step, total, _seconds(m["left"]), "tqdm", desc)


def last_bar(lines: Iterable[str], hparams: Mapping[str, Any] | None = None) -> Progress | None:
    """The progress of the last tqdm redraw among ``lines``."""
    found = None
    for line in lines:
        found = from_bar(line, hparams) or found
    return found
