"""What Slurm's client commands print, read into one typed state (``SlurmJob``).

Pure functions, no process started: each parser is tested against outputs recorded on Slurm
22.05 and built from Slurm's own data_parser definitions for 23.11 and 24.11
(``tests/slurm/fixtures``). Three sources, each in every layout it has had:

- ``squeue -O`` with our field list and a ``|`` after each field (the backend's usual query: one
  call for many jobs, filtered by Slurm, the same text since 20.11);
- ``squeue --json``: 22.05's OpenAPI v0.0.38 (``job_state`` a string, numbers plain, ``exit_code``
  a wait status) and the data_parser layouts of 23.02 and later (numbers as ``{set, infinite,
  number}``, ``exit_code`` as ``{status, return_code, signal}``; from 23.11 ``job_state`` a list
  of the base state and its flags). 22.05 ignores ``--jobs`` there: every parser filters by id;
- ``scontrol show job`` (``Key=Value`` words) and ``sacct --parsable2`` (when accounting exists).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# Base states (job_state_codes.shtml) and the flags a state may carry.
BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
FLAG_STATES = frozenset(
    {
        "COMPLETING",
        "CONFIGURING",
        "LAUNCH_FAILED",
        "POWER_UP_NODE",
        "RECONFIG_FAIL",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "RESV_DEL_HOLD",
        "REVOKED",
        "SIGNALING",
        "SPECIAL_EXIT",
        "STAGE_OUT",
        "STOPPED",
        "UPDATE_DB",
    }
)
# The fields the backend asks squeue for, in this order; ``|`` ends each (squeue -O's suffix).
SQUEUE_FIELDS = ("JobID", "State", "Reason", "RestartCnt", "NodeList", "BatchHost", "TimeLimit", "Partition")
SQUEUE_FORMAT = ",".join(f"{name}:|" for name in SQUEUE_FIELDS)
SACCT_FIELDS = ("JobIDRaw", "State", "ExitCode", "NodeList", "Partition")
_TIME = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


class SlurmOutputError(ValueError):
    """Output that none of the known layouts fits."""


@dataclass(frozen=True)
class SlurmJob:
    """One Slurm job as the backend needs it, whichever command and layout said so."""

    job_id: str
    state: str  # the base state (PENDING, RUNNING, TIMEOUT...), "" when only a flag was shown
    flags: tuple[str, ...] = ()  # COMPLETING, REQUEUED, CONFIGURING...
    reason: str | None = None  # Resources, Priority, TimeLimit...; None for Slurm's "None"
    restarts: int = 0
    nodes: str | None = None  # Slurm's node list expression: dt[1-2]
    batch_host: str | None = None
    time_limit: int | None = None  # seconds; None when unlimited or not said
    partition: str | None = None
    exit_code: int | None = None  # the batch script's return code, when it ended
    signal: int | None = None  # the signal that ended it, if one did
    cancelled_by: str | None = None  # sacct's "CANCELLED by 1000": the uid
    description: str | None = None  # state_description: details of the reason
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def shown_state(self) -> str:
        """The state as squeue prints it: a flag like COMPLETING when there is one, else the base."""
        return self.flags[0] if self.flags else self.state


def _split_state(words: list[str]) -> tuple[str, tuple[str, ...]]:
    words = [w.strip().upper() for w in words if w and w.strip()]
    base = next((w for w in words if w in BASE_STATES), "")
    flags = tuple(w for w in words if w != base)
    return base, flags


def _reason(text: Any) -> str | None:
    if not isinstance(text, str):
        return None
    text = text.strip()
    return None if text in ("", "None", "(null)", "n/a") else text


def parse_time(text: str) -> int | None:
    """Seconds of a Slurm duration as squeue prints it (``1:00``, ``2:00:00``, ``1-00:00:00``);
    None for ``UNLIMITED``/``INFINITE``/``NOT_SET``/``N/A``."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE", "NOT_SET", "N/A", ""):
        return None
    m = _TIME.fullmatch(text)
    if not m:
        raise SlurmOutputError(f"{text!r} is not a Slurm duration")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _text_or_none(text: str) -> str | None:
    text = text.strip()
    return None if text in ("", "n/a", "(null)", "None") else text


# -- squeue -O (text) --------------------------------------------------------------------------
def parse_squeue_text(text: str) -> dict[str, SlurmJob]:
    """Jobs by id from ``squeue --noheader -O SQUEUE_FORMAT``."""
    jobs: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) < len(SQUEUE_FIELDS):
            raise SlurmOutputError(f"squeue printed {line!r}, not {len(SQUEUE_FIELDS)} fields")
        job_id, state, reason, restarts, nodes, batch_host, limit, partition = (c.strip() for c in cells[:8])
        base, flags = _split_state([state])
        if not job_id or not restarts.isdigit():
            raise SlurmOutputError(f"squeue printed {line!r}: no job id or restart count")
        jobs[job_id] = SlurmJob(
            job_id=job_id,
            state=base,
            flags=flags,
            reason=_reason(reason),
            restarts=int(restarts),
            nodes=_text_or_none(nodes),
            batch_host=_text_or_none(batch_host),
            time_limit=parse_time(limit),
            partition=_text_or_none(partition),
        )
    return jobs


# -- squeue --json -----------------------------------------------------------------------------
def _number(value: Any) -> int | None:
    """A number of any layout: plain (22.05), or ``{set, infinite, number}`` (23.02 and later)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, dict):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        return _number(value.get("number"))
    return None


def _exit(value: Any) -> tuple[int | None, int | None]:
    """(return code, signal) of an exit code: 22.05's wait status, or the verbose object."""
    if isinstance(value, bool) or value is None:
        return None, None
    if isinstance(value, int):  # a wait(2) status, as the C API keeps it
        return (value >> 8) & 0xFF, (value & 0x7F) or None
    if isinstance(value, dict):
        status = value.get("status")
        statuses = status if isinstance(status, list) else [status]
        if "PENDING" in statuses:
            return None, None
        signal = value.get("signal")
        number = _number(signal.get("id")) if isinstance(signal, dict) else _number(signal)
        return _number(value.get("return_code")), number or None
    raise SlurmOutputError(f"exit_code {value!r} is in no known layout")


def _json_job(raw: dict[str, Any]) -> SlurmJob:
    state = raw.get("job_state")
    words = state if isinstance(state, list) else [state] if isinstance(state, str) else []
    if not words:
        raise SlurmOutputError(f"job {raw.get('job_id')!r} has no job_state")
    base, flags = _split_state(words)
    code, signal = _exit(raw.get("exit_code"))
    limit = _number(raw.get("time_limit"))
    return SlurmJob(
        job_id=str(raw["job_id"]),
        state=base,
        flags=flags,
        reason=_reason(raw.get("state_reason")),
        restarts=_number(raw.get("restart_cnt")) or 0,
        nodes=_text_or_none(str(raw.get("nodes") or "")),
        batch_host=_text_or_none(str(raw.get("batch_host") or "")),
        time_limit=None if limit is None else limit * 60,
        partition=_text_or_none(str(raw.get("partition") or "")),
        exit_code=code if base and base not in ("PENDING", "RUNNING", "SUSPENDED") else None,
        signal=signal,
        description=_text_or_none(str(raw.get("state_description") or "")),
    )


def json_layout(data: dict[str, Any]) -> str:
    """The layout a ``--json`` answer says it has: ``openapi/v0.0.38``, ``data_parser/v0.0.42``..."""
    meta = data.get("meta") or {}
    plugin = meta.get("plugin") or {}
    return str(plugin.get("data_parser") or plugin.get("type") or "unknown")


def parse_squeue_json(text: str, ids: set[str] | None = None) -> dict[str, SlurmJob]:
    """Jobs by id from ``squeue --json`` (only ``ids`` when given: 22.05 ignores ``--jobs``)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmOutputError(f"squeue --json printed no JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise SlurmOutputError("squeue --json printed no list of jobs")
    jobs = {}
    for raw in data["jobs"]:
        if not isinstance(raw, dict) or "job_id" not in raw:
            raise SlurmOutputError(f"a job of squeue --json ({json_layout(data)}) has no job_id")
        if ids is None or str(raw["job_id"]) in ids:
            job = _json_job(raw)
            jobs[job.job_id] = job
    return jobs


# -- scontrol show job -------------------------------------------------------------------------
_WORD = re.compile(r"(\w[\w/:]*)=(\S*)")


def parse_scontrol_text(text: str) -> dict[str, SlurmJob]:
    """Jobs by id from ``scontrol show job`` (records separated by blank lines)."""
    jobs = {}
    for block in re.split(r"\n\s*\n", text.strip()):
        words = dict(_WORD.findall(block))
        if "JobId" not in words:
            continue
        base, flags = _split_state([words.get("JobState", "")])
        code_text, _, signal_text = words.get("ExitCode", "").partition(":")
        ended = base not in ("", "PENDING", "RUNNING", "SUSPENDED")
        jobs[words["JobId"]] = SlurmJob(
            job_id=words["JobId"],
            state=base,
            flags=flags,
            reason=_reason(words.get("Reason")),
            restarts=int(words.get("Restarts", "0") or 0),
            nodes=_text_or_none(words.get("NodeList", "")),
            batch_host=_text_or_none(words.get("BatchHost", "")),
            time_limit=parse_time(words.get("TimeLimit", "")),
            partition=_text_or_none(words.get("Partition", "")),
            exit_code=int(code_text) if ended and code_text.isdigit() else None,
            signal=int(signal_text) if ended and signal_text.isdigit() and int(signal_text) else None,
        )
    return jobs


# -- sacct --parsable2 -------------------------------------------------------------------------
def parse_sacct_text(text: str) -> dict[str, SlurmJob]:
    """Jobs by id from ``sacct --noheader --parsable2 --format=SACCT_FIELDS`` (steps skipped)."""
    jobs = {}
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) < len(SACCT_FIELDS) or "." in cells[0] or not cells[0].strip():
            continue
        job_id, state, exit_code, nodes, partition = (c.strip() for c in cells[:5])
        words = state.split()
        by = words[2] if len(words) == 3 and words[1] == "by" else None
        base, flags = _split_state(words[:1])
        code_text, _, signal_text = exit_code.partition(":")
        jobs[job_id] = SlurmJob(
            job_id=job_id,
            state=base,
            flags=flags,
            nodes=_text_or_none(nodes) if nodes != "None assigned" else None,
            partition=_text_or_none(partition),
            exit_code=int(code_text) if code_text.isdigit() else None,
            signal=int(signal_text) if signal_text.isdigit() and int(signal_text) else None,
            cancelled_by=by,
        )
    return jobs


# -- sbatch and versions -----------------------------------------------------------------------
def parse_sbatch(text: str) -> str:
    """The job id ``sbatch --parsable`` printed (``123`` or ``123;cluster``)."""
    line = text.strip().splitlines()[-1] if text.strip() else ""
    job_id = line.split(";")[0].strip()
    if not job_id.isdigit():
        raise SlurmOutputError(f"sbatch printed {text.strip()[:200]!r}, not a job id")
    return job_id


def parse_version(text: str) -> tuple[int, int, int]:
    """``slurm 23.11.4`` or ``slurm-wlm 22.05.8`` → ``(23, 11, 4)``."""
    m = _VERSION.search(text)
    if not m:
        raise SlurmOutputError(f"{text.strip()[:100]!r} names no Slurm version")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
