"""What the GPU check found: each check's items (PASS, FAIL, or SKIP with the reason), its figures,
and the JSON report with its log beside it.

A check is a function that is handed a ``Check`` and records what it saw: ``expect`` for what must
hold here, ``expect(..., gpu=True)`` for what only a GPU can show (SKIP in CPU mode, with what the
CPU run saw), ``figure`` for a measured number. Its status: FAIL when an item failed or it raised;
SKIP when it passed but a GPU item was skipped (CPU mode); else PASS.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
NO_GPU = "CPU mode: no GPU"
REPORT_FILE = "gpu-check.json"
LOG_FILE = "gpu-check.log"


@dataclass
class Item:
    """One thing a check looked at: ``detail`` says what it saw."""

    what: str
    status: str
    detail: str = ""


@dataclass
class Result:
    """One check's outcome, as the report keeps it."""

    name: str
    title: str
    status: str = PASS
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    items: list[Item] = field(default_factory=list)
    error: str | None = None
    # What a failure leaves to read on this side: the jobs' logs and status events, bounded.
    evidence: dict[str, str] = field(default_factory=dict)

    def settle(self) -> None:
        """The check's status from its items (and whether it raised)."""
        statuses = {item.status for item in self.items}
        if self.error is not None or FAIL in statuses:
            self.status = FAIL
        elif SKIP in statuses:
            self.status = SKIP
        else:
            self.status = PASS


class Check:
    """What a check function records into: items, figures, evidence."""

    def __init__(self, result: Result, gpu: bool, log: Log) -> None:
        self.result = result
        self.gpu = gpu
        self.log = log

    def expect(self, what: str, ok: bool, detail: object = "", *, gpu: bool = False) -> bool:
        """Record ``what`` as PASS or FAIL; with ``gpu`` in CPU mode, as SKIP (``detail`` then says
        what the CPU run saw instead). Returns ``ok``."""
        text = detail if isinstance(detail, str) else json.dumps(detail, default=str)
        if gpu and not self.gpu:
            status = SKIP
            text = f"{NO_GPU}; saw: {text}" if text else NO_GPU
        else:
            status = PASS if ok else FAIL
        self.result.items.append(Item(what, status, text))
        self.log.line(f"    {status} {what}" + (f": {text}" if text else ""))
        return ok

    def figure(self, name: str, value: Any) -> Any:
        """Record a measured value (seconds, ratios, names, versions) under ``name``."""
        self.result.figures[name] = value
        self.log.line(f"    figure {name} = {value}")
        return value

    def evidence(self, key: str, text: str, limit: int = 6000) -> None:
        """Keep ``text`` (its last ``limit`` characters) for a reader of a failed run."""
        self.result.evidence[key] = text[-limit:]


class Log:
    """The check's log: each line to stdout and to the log file as it happens."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept for the run)
        self._start = time.monotonic()

    def line(self, text: str) -> None:
        stamped = f"[{time.monotonic() - self._start:7.1f}s] {text}"
        print(stamped, flush=True)
        self._file.write(stamped + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


@dataclass
class Report:
    """The whole run: where and how it ran, and every check's result so far."""

    mode: str
    started: str
    environment: dict[str, Any] = field(default_factory=dict)
    setup: dict[str, Any] = field(default_factory=dict)
    checks: list[Result] = field(default_factory=list)
    finished: str | None = None
    seconds: float = 0.0
    aborted: str | None = None

    def summary(self) -> dict[str, int]:
        counts = {PASS: 0, FAIL: 0, SKIP: 0}
        for result in self.checks:
            counts[result.status] += 1
        return counts

    def failed(self) -> bool:
        return self.aborted is not None or any(r.status == FAIL for r in self.checks)

    def write(self, path: Path) -> None:
        """Write the report atomically (it is rewritten after every check: a cut run keeps its part)."""
        data = {**asdict(self), "summary": self.summary()}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
