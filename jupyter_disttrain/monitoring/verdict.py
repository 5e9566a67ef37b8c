"""A diagnosis said in one sentence, in the notebook's words.

"rank-1 has not joined all_reduce #5 (default group); it is at Cell In[4], line 2
(`time.sleep(30)`); rank-0 waits in all_reduce at Cell In[5], line 7": the analysis of the ranks'
Flight Recorders (``flightrec``) says which collective; each rank's stack (from its debug socket,
else py-spy or faulthandler) says where it is, its innermost frame of the user's code named by
its cell and line (the packaging's line map, ``tracebacks.LineMap``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..model import tracebacks
from ..model.tracebacks import Frame, LineMap
from ..payloads.monitoring import RankDiagnosis
from ..storage.safefiles import open_regular
from .flightrec import Analysis, Finding, Op, Position

ORIGINS_BYTES = 4 * 2**20  # a line map larger than this (a huge notebook) is not read
MAX_STACK = 64 * 1024  # of one rank's stacks kept in a diagnosis
_LIBRARIES = ("site-packages/", "dist-packages/", "/lib/python", "<frozen ")


def line_map(job_dir: Path, script_name: str) -> LineMap:
    """The job's script and the packaging's line map (nothing maps where either is unreadable)."""
    script = _read(job_dir / script_name, 64 * 2**20) or ""
    origins = None
    if (text := _read(job_dir / tracebacks.ORIGINS_FILE, ORIGINS_BYTES)) is not None:
        try:
            loaded = json.loads(text)
            origins = loaded if isinstance(loaded, dict) else None
        except ValueError:
            origins = None
    return LineMap.of(script_name, script, origins)


def _read(path: Path, limit: int) -> str | None:
    try:
        with open_regular(path) as f:
            data = f.read(limit + 1)
    except OSError:
        return None
    return None if len(data) > limit else data.decode("utf-8", "replace")


@dataclass
class Place:
    """Where a rank is: ``Cell In[4], line 2`` (or the script's or a library's file and line) and
    that line's text."""

    where: str
    source: str


def locate(stack: str | None, where: LineMap) -> Place | None:
    """The innermost frame of the user's code in the rank's main thread: a cell's line, else the
    script's, else the innermost frame outside the libraries, else the innermost."""
    if not stack:
        return None
    threads = tracebacks.stack_threads(stack)
    main = next((t for t in threads if any(where.is_script(f.file, f.line, None) for f in t)), None)
    frames = main or next(iter(threads), [])
    for frame in frames:
        where.place(frame, known_source=False)
        if frame.cell:
            return Place(f"Cell {frame.cell.replace(' ', '')}, line {frame.cell_line}", frame.source)
    for frame in frames:
        if where.is_script(frame.file, frame.line, None):
            return Place(f"{where.script_name}, line {frame.line}", frame.source)
    mine = [f for f in frames if not any(lib in f.file for lib in _LIBRARIES)]
    return _plain(mine[0] if mine else frames[0]) if frames else None


def _plain(frame: Frame) -> Place:
    return Place(f"{frame.file}, line {frame.line}, in {frame.name}", frame.source)


def rank_name(rank: int) -> str:
    return f"rank-{rank}"


def _names(ranks: list[int]) -> str:
    named = [rank_name(r) for r in ranks]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]


def _at(place: Place | None, with_source: bool) -> str:
    if place is None:
        return "at a place its stacks do not show"
    text = f"at {place.where}"
    return f"{text} (`{place.source}`)" if with_source and place.source else text


@dataclass
class Reading:
    """What was read of each replica for a verdict (by name: ``rank-1``; a process that is no
    rank, ``server-0``, has a place but no collectives): the analysis, each one's place, and why
    one could not be read (its socket did not answer, it has none)."""

    analysis: Analysis
    places: dict[str, Place | None]
    unanswered: dict[str, str]  # replica -> why there is no Flight Recorder record from it
    replicas: list[str]

    def place(self, rank: int) -> Place | None:
        return self.places.get(rank_name(rank))

    def answered(self, rank: int) -> bool:
        return rank_name(rank) not in self.unanswered


def _missing(f: Finding, r: Reading) -> str:
    culprits = [m for m in f.missing if r.answered(m) or r.place(m)]
    verb = "has" if len(f.missing) == 1 else "have"
    text = f"{_names(f.missing)} {verb} not joined {f.op} #{f.seq} ({f.group})"
    if len(culprits) == 1:
        text += f"; it is {_at(r.place(culprits[0]), True)}"
    else:
        text += "".join(f"; {rank_name(c)} is {_at(r.place(c), True)}" for c in culprits)
    return text + _waiting(f, r)


def _waiting(f: Finding, r: Reading) -> str:
    """ "; rank-0 waits in all_reduce at Cell In[5], line 7", the ranks at one place together."""
    waiting = [k for k, o in sorted(f.ops.items()) if not o.completed and k not in f.missing]
    by_place: dict[str, list[int]] = {}
    for rank in waiting:
        by_place.setdefault(_at(r.place(rank), False), []).append(rank)
    out = ""
    for at, ranks in by_place.items():
        out += f"; {_names(ranks)} {'waits' if len(ranks) == 1 else 'wait'} in {f.op} {at}"
    return out


def _mismatch(f: Finding, r: Reading) -> str:
    ops = sorted(f.ops.items())
    if f.what == "type":
        called = ", ".join(f"{rank_name(k)} {o.name}" for k, o in ops)
        text = f"the ranks called different collectives as #{f.seq} ({f.group}): {called}"
    else:
        shapes = ", ".join(f"{rank_name(k)} {_shape(o)}" for k, o in ops)
        what = "types" if f.what == "dtype" else "shapes"
        text = f"{f.op} #{f.seq} ({f.group}) was called with different {what}: {shapes}"
    wheres = "; ".join(f"{rank_name(k)} is {_at(r.place(k), False)}" for k, _ in ops if r.place(k))
    return text + (f"; {wheres}" if wheres else "")


def _shape(op: Op) -> str:
    return op.shape()


def _quiet_collectives(r: Reading) -> str:
    """No collective is found wrong: which ranks wait in which (every rank called it when all
    answered: it is slow, not stuck on a peer), where the others are, else the last collective."""
    positions = r.analysis.positions
    waiting = {k: p for k, p in positions.items() if p.waiting}
    parts = []
    by_place: dict[tuple[str, str], list[int]] = {}
    for rank, p in sorted(waiting.items()):
        by_place.setdefault((f"{p.op.name} #{p.seq} ({p.group})", _at(r.place(rank), False)), []).append(rank)
    for (what, at), ranks in by_place.items():
        parts.append(f"{_names(ranks)} {'waits' if len(ranks) == 1 else 'wait'} in {what} {at}")
    if waiting and not r.unanswered:
        parts[-1] += ", which every rank has called: it has not completed yet"
    if not positions:
        parts.append("no collective record: the ranks have not used torch.distributed")
    elif not waiting:
        last: Position = max(positions.values(), key=lambda p: p.seq)
        parts.append(f"no collective is pending: the last was {last.op.name} #{last.seq} ({last.group})")
    waiters = {rank_name(k) for k in waiting}
    parts += [
        f"{name} is {_at(r.places.get(name), True)}"
        for name in r.replicas
        if name not in r.unanswered and name not in waiters and r.places.get(name)
    ]
    return "; ".join(parts)


def sentence(r: Reading) -> str:
    """The verdict: the first finding (the others follow from it), else where everyone is; the
    ranks that could not be read named after it."""
    first = r.analysis.findings[0] if r.analysis.findings else None
    if first is None:
        text = _quiet_collectives(r)
    elif first.kind == "missing":
        text = _missing(first, r)
    else:
        text = _mismatch(first, r)
    missing = {rank_name(m) for m in (first.missing if first else [])}
    for name in r.replicas:
        why = r.unanswered.get(name)
        if why is None:
            continue
        if r.places.get(name) is not None and name not in missing:
            why += f"; its stacks show it {_at(r.places[name], True)}"
        text += f"; {name} did not answer ({why})"
    return text


def _state(name: str, r: Reading, first: Finding | None) -> tuple[str, str | None]:
    """A replica's state in the diagnosis and the collective it concerns."""
    rank = int(name[5:]) if name.startswith("rank-") and name[5:].isdigit() else -1
    if first is not None and rank in first.missing:
        return "not joined", f"{first.op} #{first.seq} ({first.group})"
    if first is not None and first.kind == "mismatch" and rank in first.ops:
        return "mismatch", f"{first.ops[rank].name} #{first.seq} ({first.group})"
    note = r.unanswered.get(name)
    if note is not None:
        return ("no answer" if "answer" in note else "ended" if "not running" in note else "no record"), None
    position = r.analysis.positions.get(rank)
    if position is not None and position.waiting:
        return "waiting", f"{position.op.name} #{position.seq} ({position.group})"
    return "running", None


def rank_parts(r: Reading, stacks: dict[str, str | None], where: LineMap) -> list[RankDiagnosis]:
    """Each replica's line of the diagnosis."""
    first = r.analysis.findings[0] if r.analysis.findings else None
    out = []
    for name in r.replicas:
        state, collective = _state(name, r, first)
        place = r.places.get(name) or Place("", "")
        stack = stacks.get(name)
        mapped = tracebacks.map_stack(stack, where)[:MAX_STACK] if stack else None
        part = RankDiagnosis(name, state, collective, place.where or None, place.source or None, None, mapped)
        part.note = r.unanswered.get(name)
        out.append(part)
    return out


def places_of(stacks: dict[str, str | None], where: LineMap) -> dict[str, Place | None]:
    return {name: locate(text, where) for name, text in stacks.items()}
