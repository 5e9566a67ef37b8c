"""How far a job is, read off what it prints: tqdm's bar or Rich's (Lightning's either) in the
rank-0 log.

A plain script with a tqdm bar says ``45/100 [00:02<00:03, 17.9it/s]`` on every redraw; the log
reader keeps each ``\\r``-ended redraw as a line, so the last one is where the job stands. A
Lightning tqdm bar says ``Epoch 2:  45%|...| 45/100``: with the job's ``max_epochs`` (a captured
hyper-parameter), that is epoch 2 of ``max_epochs`` and the total covers them all. Lightning's
Rich bar (``rich`` installed) says ``Epoch 2/4 ━━━━ 45/100 0:00:02 • 0:00:03 17.90it/s``: its
description names the last epoch itself.

The parse is linear in the line: a running job's log is read on every poll of the job list, and
its last line may be anything (megabytes of one undecodable line). Only the first ``SCAN_CHARS``
of the line's last redraw are looked at (a bar starts its redraw), the times are found by
patterns with no nested repetition, and the count, bar and description before them are read
backwards from there within fixed windows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SCAN_CHARS = 4096  # of a redraw looked at: a bar (with its description) starts it
_COUNT_WINDOW = 64  # chars before the times holding "45/100" (or "45it")
_DESC_WINDOW = 256  # chars of a description kept
_CANDIDATES = 32  # places that look like a bar's times, tried in order
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # colours, cursor moves: Rich's redraws have them

# tqdm's redraw: `desc:  45%|████▌     | 45/100 [00:02<00:03, 17.9it/s, loss=0.5]`, found by its
# times ` [00:02<00:03,` (` [00:02,` with no total), then read back: the count right before them
# (`45/100`, `1.2k/1.2k`, `45it`), a bar `45%|...|` and a description ending in ":".
_TQDM_TIMES = re.compile(r" \[(?P<elapsed>\d[\d:]*)(?:<(?P<left>[\d:?]+))?,")
_NUMBER = r"\d+(?:\.\d+)?[kMG]?"
_TQDM_COUNT = re.compile(rf"(?P<n>{_NUMBER})(?:/(?P<total>{_NUMBER}))?(?:it)?\Z")
_PERCENT = re.compile(r"\d+%\Z")
_SCALE = {"k": 1e3, "M": 1e6, "G": 1e9}
_EPOCH = re.compile(r"^Epoch (\d+)$")  # Lightning's description: its max_epochs is an hparam

# Rich's (Lightning's RichProgressBar): `Epoch 3/19 ━━━━╸━━ 2/2 0:00:02 • 0:00:03 1.0it/s`, found
# by its CustomTimeColumn (str(timedelta), `-:--:--` when unknown), then read back: `2/2`
# (`2/--` with no total), the bar, and the description naming the last epoch itself.
_CLOCK = r"(?:\d{1,9} days?, )?\d{1,9}:\d\d:\d\d|-:--:--"
_RICH_TIMES = re.compile(rf" (?P<elapsed>{_CLOCK}) \u2022 (?P<left>{_CLOCK})")
_RICH_COUNT = re.compile(r"(?P<n>\d+)/(?P<total>\d+|--)\Z")
_RICH_BAR = " \u2501\u2578\u257a\u2500-"  # heavy line, its half ends, light line
_RICH_EPOCH = re.compile(r"^Epoch (\d+)(?:/(-?\d+))?$")


@dataclass
class Progress:
    """A step out of a total (when known), the seconds left (when known) and where it was read."""

    step: int
    total: int | None
    eta_seconds: float | None
    source: str  # "em" | "tqdm" | "rich"
    label: str | None = None  # the bar's description (tqdm's ``desc``: "Epoch 2")


def eta_text(seconds: float | None) -> str:
    """``ETA 1:05:00`` (``ETA 0:03`` under an hour); empty when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return ""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"ETA {hours}:{minutes:02d}:{secs:02d}" if hours else f"ETA {minutes}:{secs:02d}"


def progress_text(p: Progress) -> str:
    """``45/100 (45%) · ETA 0:03 · train``: what the bar says in words."""
    parts = [f"{p.step}/{p.total} ({100 * p.step // p.total}%)" if p.total else f"step {p.step}"]
    parts += [x for x in (eta_text(p.eta_seconds), p.label or "") if x]
    return " · ".join(parts)


def _count(text: str | None) -> int | None:
    if not text or not text[0].isdigit():
        return None
    scale = _SCALE.get(text[-1], 1.0)
    return int(float(text.rstrip("kMG")) * scale)


def _seconds(text: str | None) -> float | None:
    if not text or "?" in text or "-" in text:
        return None
    days = 0
    if "," in text:  # "1 day, 2:03:04"
        head, text = text.split(",", 1)
        days = int(head.split()[0])
    seconds = 0.0
    for part in text.strip().split(":"):
        seconds = seconds * 60 + int(part)
    return days * 86400 + seconds


@dataclass
class _Bar:
    """What one redraw says before it is read as progress."""

    step: int
    total: int | None
    elapsed: float | None
    left: float | None
    desc: str | None
    source: str


def _redraw(line: str) -> str:
    """The beginning of the line's last redraw, escape codes left out."""
    last = line.rstrip("\r\n")
    return _ANSI.sub("", last[last.rfind("\r") + 1 :][:SCAN_CHARS])


def _tqdm(text: str) -> _Bar | None:
    for times in _candidates(_TQDM_TIMES, text):
        start = times.start()
        count = _TQDM_COUNT.search(text, max(0, start - _COUNT_WINDOW), start)
        step = _count(count["n"]) if count else None
        if count is None or step is None:
            continue
        head = text[: count.start()].rstrip()
        if head.endswith("|"):  # `45%|████▌     |`
            opened = head.rfind("|", max(0, len(head) - SCAN_CHARS), len(head) - 1)
            percent = _PERCENT.search(head, max(0, opened - 8), opened) if opened >= 0 else None
            head = head[: percent.start()].rstrip() if percent else head
        desc = head[:-1] if head.endswith(":") else ""
        desc = desc[desc.rfind("|") + 1 :][-_DESC_WINDOW:].strip()
        elapsed, left = _seconds(times["elapsed"]), _seconds(times["left"])
        return _Bar(step, _count(count["total"]), elapsed, left, desc or None, "tqdm")
    return None


def _rich(text: str) -> _Bar | None:
    for times in _candidates(_RICH_TIMES, text):
        start = times.start()
        count = _RICH_COUNT.search(text, max(0, start - _COUNT_WINDOW), start)
        if count is None:
            continue
        desc = text[max(0, count.start() - _DESC_WINDOW) : count.start()].rstrip(_RICH_BAR).strip()
        elapsed, left = _seconds(times["elapsed"]), _seconds(times["left"])
        return _Bar(int(count["n"]), _count(count["total"]), elapsed, left, desc or None, "rich")
    return None


def _candidates(pattern: re.Pattern[str], text: str) -> Iterable[re.Match[str]]:
    for index, found in enumerate(pattern.finditer(text)):
        if index >= _CANDIDATES:
            return
        yield found


def _epochs(bar: _Bar, hparams: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(this epoch, how many) when the bar is Lightning's epoch bar and the count is known."""
    if bar.source == "rich":
        rich = _RICH_EPOCH.match(bar.desc or "")
        if rich and rich[2] is not None and int(rich[2]) >= 0:
            return int(rich[1]), int(rich[2]) + 1  # "Epoch 3/19": epochs 0..19
        epoch = rich
    else:
        epoch = _EPOCH.match(bar.desc or "")
    epochs = (hparams or {}).get("max_epochs")
    if epoch and isinstance(epochs, int) and not isinstance(epochs, bool) and epochs > 0:
        return int(epoch[1]), epochs
    return None


def from_bar(line: str, hparams: Mapping[str, Any] | None = None) -> Progress | None:
    """The progress a tqdm or Rich redraw shows (None when ``line`` is none)."""
    text = _redraw(line)
    bar = _tqdm(text) or _rich(text)
    if bar is None:
        return None
    counted = _epochs(bar, hparams)
    if counted is None or not bar.total:
        return Progress(bar.step, bar.total, bar.left, bar.source, bar.desc)
    done, epochs = counted
    left = bar.left
    if left is not None and bar.elapsed is not None and bar.step:
        left += (epochs - done - 1) * (bar.elapsed + left)  # the epochs still to come, at this one's pace
    step, total = done * bar.total + bar.step, epochs * bar.total
    return Progress(step, total, left, bar.source, f"epoch {done + 1} of {epochs}")


def last_bar(lines: Iterable[str], hparams: Mapping[str, Any] | None = None) -> Progress | None:
    """The progress of the last tqdm or Rich redraw among ``lines``; Lightning's epoch bar wins
    over a later validation bar (Rich redraws both, one line each, and tqdm's stays on screen)."""
    found = epoch = None
    for line in lines:
        reading = from_bar(line, hparams)
        if reading is not None:
            found = reading
            if (reading.label or "").startswith(("Epoch ", "epoch ")):
                epoch = reading
    return epoch or found
