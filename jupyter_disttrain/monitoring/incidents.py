"""A job's diagnoses ("which rank is stuck, in which collective, at which cell line"), made and kept.

``collect_here`` reads the ranks of this machine: each rank's debug socket
(``runtime/debugsock.py``: its Flight Recorder and stacks), and for a rank whose socket gives no
stacks (none, or blocked in native code holding the GIL) py-spy or its faulthandler
(``stacks.py``), which need no GIL. Backends whose ranks run elsewhere read them there (a Slurm
node through srun, a pod through ``pods/exec``) into the same shape. ``diagnose`` analyses what
was read (``flightrec``), says it in one sentence (``verdict``) and keeps the whole as
``incidents/<time>-<trigger>.json`` in the job dir, never overwriting an earlier one, and what
was read beside it (``<name>.dumps.json``: each rank's Flight Recorder dump and stacks as read);
the details list them newest first (each read once: an incident never changes).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..model.specs import now_iso
from ..model.tracebacks import LineMap
from ..payloads.monitoring import Incident, IncidentSummary, RankDiagnosis
from ..runtime import contract, debugsock
from ..runtime.atomic import write_atomic
from ..storage.safefiles import open_regular
from . import flightrec, verdict

DUMPS = ".dumps.json"  # beside an incident: what was read of each rank
_READ: dict[str, IncidentSummary] = {}  # incidents listed already, by path: they never change
FALLBACK_WAIT = 2.0  # seconds a faulthandler dump may take when the socket gave no stacks
MAX_INCIDENT_BYTES = 8 * 2**20  # of one incident file read back
LISTED = 50  # incidents a job's details list, newest first
NAME = re.compile(r"[0-9TZ.-]+-[a-z]+(?:-\d+)?")
TRIGGERS = ("manual", "stalled", "idle")

ENDED = "its process is not running"
# What was read of one replica: {"fr": dump | None, "stack": text | None, "errors": {handler: why},
# "method": how the stack was taken}; a replica with no socket is absent.
Answers = dict[str, dict[str, Any]]


def collect_here(
    job_dir: Path, job_id: str, replicas: list[str], timeout: float = debugsock.TIMEOUT
) -> Answers:
    """Read those of ``replicas`` that run on this machine (by their records; all of a local
    job): their sockets, then py-spy or faulthandler for each running one whose socket gave no
    stacks; one that neither answers nor runs says so."""
    records = rank_records(job_dir, replicas)
    host = socket.gethostname()
    mine = [name for name in replicas if records.get(name, {}).get("host", host) == host]
    answers = debugsock.collect(str(job_dir), timeout, mine)
    for answer in answers.values():
        if answer.get("stack"):
            answer["method"] = "socket"
    running = {name: int(rec["pid"]) for name, rec in records.items() if name in mine and _runs(rec, job_id)}
    lacking = {name: pid for name, pid in running.items() if not (answers.get(name) or {}).get("stack")}
    if lacking:
        with ThreadPoolExecutor(min(16, len(lacking))) as pool:
            futures = {n: pool.submit(_other_stack, job_dir, job_id, n, pid) for n, pid in lacking.items()}
            for name, future in futures.items():
                method, text = future.result()
                if text:
                    answers.setdefault(name, {"fr": None, "errors": {}}).update(stack=text, method=method)
    for name in mine:
        if name in records and name not in running and not (answers.get(name) or {}).get("fr"):
            answers[name] = {"fr": None, "stack": None, "errors": {debugsock.FLIGHT_RECORDER: ENDED}}
    return answers


def rank_records(job_dir: Path, replicas: list[str]) -> dict[str, dict[str, Any]]:
    """The records (``ranks/<replica>.json``) of those of ``replicas`` that have one."""
    from ..storage.store import read_json

    out = {}
    for name in replicas:
        with contextlib.suppress(OSError, ValueError):
            rec = read_json(job_dir / contract.RANKS_DIR / contract.record_file(name))
            if isinstance(rec, dict) and isinstance(rec.get("pid"), int):
                out[name] = rec
    return out


def _runs(rec: dict[str, Any], job_id: str) -> bool:
    from ..storage import procs

    return rec.get("exit_code") is None and procs.runs_job(int(rec["pid"]), job_id)


def _other_stack(job_dir: Path, job_id: str, replica: str, pid: int) -> tuple[str, str | None]:
    """py-spy's dump, else the rank wrapper's faulthandler's; none when neither can be had."""
    from .stacks import faulthandler_dump, py_spy_dump

    text, _ = py_spy_dump(pid)
    if text is not None:
        return "py-spy", text
    with contextlib.suppress(Exception):
        return "faulthandler", faulthandler_dump(pid, job_dir, replica, wait=FALLBACK_WAIT)
    return "", None


def _why(answer: dict[str, Any] | None) -> str | None:
    """Why a replica has no Flight Recorder record, or None when it has one."""
    if answer is not None and answer.get("fr") is not None:
        return None
    errors = (answer or {}).get("errors") or {}
    if not errors:
        return "no debug socket: it has not imported torch.distributed, or its torch serves none"
    said = errors.get(debugsock.FLIGHT_RECORDER) or "no record"
    if said == ENDED:
        return said
    if "within" in said:
        return f"no answer within {debugsock.TIMEOUT:g} s: blocked in native code holding the GIL, or stopped"
    return f"no answer: {said}"


def _rank_of(name: str) -> int | None:
    return int(name[5:]) if name.startswith("rank-") and name[5:].isdigit() else None


def diagnose(
    replicas: list[str], answers: Answers, where: LineMap, *, job_id: str, trigger: str, started: float
) -> tuple[Incident, dict[str, Any]]:
    """The incident of what was read: its verdict and each replica's part; and the raw record
    (each rank's Flight Recorder dump and stacks as read) kept beside it in its file."""
    dumps = {
        rank: answer["fr"]
        for name, answer in answers.items()
        if (rank := _rank_of(name)) is not None and isinstance(answer.get("fr"), dict)
    }
    world = sorted(rank for name in replicas if (rank := _rank_of(name)) is not None)
    analysis = flightrec.analyse(dumps, world)
    stacks = {name: (answers.get(name) or {}).get("stack") for name in replicas}
    unanswered = {name: why for name in replicas if (why := _why(answers.get(name))) is not None}
    if analysis.analyzer == "none":  # nobody has a record: say what the stacks show, no blame
        unanswered = {n: w for n, w in unanswered.items() if not (stacks.get(n) and w.startswith("no debug"))}
    reading = verdict.Reading(analysis, verdict.places_of(stacks, where), unanswered, replicas)
    methods = {n: a.get("method") for n, a in sorted(answers.items())}
    notes = [
        *analysis.notes,
        *(f"{n}: stacks by {m}" for n, m in methods.items() if m not in (None, "socket")),
    ]
    incident = Incident(
        job_id=job_id,
        name="",
        time=now_iso(),
        trigger=trigger,
        verdict=verdict.sentence(reading),
        analyzer=analysis.analyzer,
        seconds=round(time.monotonic() - started, 3),
        ranks=verdict.rank_parts(reading, stacks, where),
        notes=notes,
    )
    kept = ("fr", "stack", "errors", "method")
    return incident, {name: {k: v for k, v in a.items() if k in kept} for name, a in answers.items()}


def keep(job_dir: Path, incident: Incident, raw: dict[str, Any]) -> Incident:
    """Write ``incident`` into the job dir under a name of its own (never over another); it now
    has that name."""
    folder = job_dir / contract.INCIDENTS_DIR
    folder.mkdir(exist_ok=True)  # as private as the job dir it is in (--group-access: its group reads)
    stamp = incident.time.replace(":", "").replace("-", "")
    for n in range(1, 1000):
        name = f"{stamp}-{incident.trigger}" + (f"-{n}" if n > 1 else "")
        path = folder / f"{name}.json"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            continue
        os.close(fd)
        incident.name = name
        write_atomic(folder / f"{name}{DUMPS}", json.dumps(raw, indent=1).encode())
        write_atomic(path, json.dumps(asdict(incident), indent=1).encode())
        return incident
    raise OSError(f"too many incidents named {stamp}-{incident.trigger} in {folder}")


def summaries(job_dir: Path, limit: int = LISTED) -> list[IncidentSummary]:
    """The job's incidents, newest first (at most ``limit``)."""
    try:
        stems = (p.stem for p in (job_dir / contract.INCIDENTS_DIR).glob("*.json"))
        names = sorted((n for n in stems if NAME.fullmatch(n)), reverse=True)
    except OSError:
        return []
    out = []
    for name in names[:limit]:
        key = str(job_dir / contract.INCIDENTS_DIR / name)
        summary = _READ.get(key)
        if summary is None and (found := read(job_dir, name)) is not None:
            summary = IncidentSummary(found.name, found.time, found.trigger, found.verdict)
            if len(_READ) > 10_000:
                _READ.clear()
            _READ[key] = summary
        if summary is not None:
            out.append(summary)
    return out


def read(job_dir: Path, name: str) -> Incident | None:
    """The incident ``name`` of the job (None when it is not there or not one)."""
    if not NAME.fullmatch(name):
        return None
    try:
        with open_regular(job_dir / contract.INCIDENTS_DIR / f"{name}.json") as f:
            data = json.loads(f.read(MAX_INCIDENT_BYTES + 1)[:MAX_INCIDENT_BYTES])
        ranks = [RankDiagnosis(**r) for r in data["ranks"]]
        fields = {
            k: data[k] for k in ("job_id", "trigger", "verdict", "analyzer", "seconds", "notes", "time")
        }
        return Incident(name=name, ranks=ranks, **fields)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def make(
    job_dir: Path,
    job_id: str,
    script: str,
    replicas: list[str],
    answers: Answers,
    trigger: str,
    started: float,
) -> Incident:
    """Diagnose what was read of the job in ``job_dir`` (its script ``script``) and keep it."""
    incident, raw = diagnose(
        replicas, answers, verdict.line_map(job_dir, script), job_id=job_id, trigger=trigger, started=started
    )
    return keep(job_dir, incident, raw)
