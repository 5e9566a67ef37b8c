"""A run's points as one curve across the checkpoints it continued from (README "Checkpoints").

A run resumed from another job's checkpoint (``run.json``'s ``resumed_from`` {job, run, step};
that job's directory is in this job's ``job.json``, ``spec.resumed_from.job_dir``) shows the old
run's points up to the step, then its own. A run whose ranks restarted from a checkpoint of this
job (``restarts``: [{offset, step}], where its metrics file was at the restart) leaves out the
earlier attempt's points past that step, which the new attempt logs again. So each step shows
once. The files are read as one stream: a page's offsets run on from one file into the next
(the earlier job has ended, so its file no longer grows).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..payloads.runs import RunPoint
from ..runtime.contract import JOB_FILE, RUN_NAME_PATTERN

_RUN_NAME = re.compile(RUN_NAME_PATTERN)
MAX_RESUMES = 20  # runs resumed from runs resumed from...: a chain is followed this far

# (job dir, run) -> the run's record; (job dir, parts) -> a small JSON file's content.
LoadRecord = Callable[[Path, str], "dict[str, Any] | None"]
LoadJson = Callable[[Path, list[str]], Any]
Keep = Callable[[int, RunPoint], bool]
FirstStep = Callable[[Path, list[str], int], "int | None"]  # (job dir, parts, offset) -> step
ReadPage = Callable[[Path, list[str], int, int, "Keep | None"], "tuple[list[RunPoint], int, bool]"]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Segment:
    job_dir: Path
    parts: list[str]
    cap: int | None = None  # points past this step are left out: a later resume started there
    # (offset, last, step): before offset, no point past step ``last``; ``step``: the checkpoint's
    cuts: tuple[tuple[int, int, int], ...] = ()
    resumed_at: int | None = None  # the step this segment continues from

    def keeps(self, offset: int, point: RunPoint) -> bool:
        step = point.step
        if step is None:
            return True
        if self.cap is not None and step > self.cap:
            return False
        return not any(offset < at and step > last for at, last, _ in self.cuts)

    @property
    def plain(self) -> bool:
        return self.cap is None and not self.cuts


def _bound(step: int | None, first: int | None) -> int | None:
    """The last step kept of the points before a resume: the checkpoint's step, and below the
    first step logged after it (a library whose checkpoint "step N" is N steps done logs step
    N again)."""
    if first is None:
        return step
    return first - 1 if step is None else min(step, first - 1)


def _cuts(
    record: dict[str, Any], first_after: Callable[[int], int | None]
) -> tuple[tuple[int, int, int], ...]:
    restarts = record.get("restarts")
    out = []
    for entry in restarts if isinstance(restarts, list) else []:
        at, step = (
            (_int(entry.get("offset")), _int(entry.get("step"))) if isinstance(entry, dict) else (None, None)
        )
        bound = _bound(step, first_after(at)) if at is not None and step is not None else None
        if at is not None and step is not None and bound is not None:
            out.append((at, bound, step))
    return tuple(out)


def _earlier(
    job_dir: Path, record: dict[str, Any], load_json: LoadJson
) -> tuple[Path, str, int | None] | None:
    """The job dir, run and step a resumed run continues, when this job's record names it."""
    wanted = record.get("resumed_from")
    if not isinstance(wanted, dict) or not _RUN_NAME.fullmatch(str(wanted.get("run"))):
        return None
    job = load_json(job_dir, [JOB_FILE])
    spec = job.get("spec") if isinstance(job, dict) else None
    found = spec.get("resumed_from") if isinstance(spec, dict) else None
    if not isinstance(found, dict) or found.get("job") != wanted.get("job"):
        return None
    old_dir = found.get("job_dir")
    if not isinstance(old_dir, str) or not Path(old_dir).is_absolute() or Path(old_dir) == job_dir:
        return None
    return Path(old_dir), wanted["run"], _int(wanted.get("step"))


def segments(
    job_dir: Path,
    record: dict[str, Any],
    parts: Callable[[str, dict[str, Any]], list[str]],
    load_record: LoadRecord,
    load_json: LoadJson,
    run: str,
    first_step: FirstStep,
) -> list[Segment]:
    """The files of ``run``'s curve, oldest first, each with what it leaves out. ``parts`` names
    a run's metrics file (the rank asked for) given its name and record; ``first_step`` reads
    the first step a file logged from an offset on."""

    def segment(where: Path, name: str, rec: dict[str, Any]) -> Segment:
        names = parts(name, rec)
        return Segment(where, names, cuts=_cuts(rec, lambda at: first_step(where, names, at)))

    found = [segment(job_dir, run, record)]
    seen = {(job_dir, run)}
    while len(found) <= MAX_RESUMES:
        earlier = _earlier(found[0].job_dir, record, load_json)
        if earlier is None or (earlier[0], earlier[1]) in seen:
            break
        old_dir, old_run, step = earlier
        old_record = load_record(old_dir, old_run)
        if old_record is None:
            break
        seen.add((old_dir, old_run))
        # The older run stops before the newer one's first step, and at every later resume's.
        later, bound = found[0].cap, _bound(step, first_step(found[0].job_dir, found[0].parts, 0))
        cap = later if bound is None else (bound if later is None else min(bound, later))
        found[0] = replace(found[0], resumed_at=step)
        found.insert(0, replace(segment(old_dir, old_run, old_record), cap=cap))
        record = old_record
    return found


def resumed_at(found: list[Segment]) -> list[int]:
    """The steps where the curve continues from a checkpoint, oldest first: each resume from
    another job's and each restart from the job's own (one past a later resume's step is not
    on the curve)."""
    steps = {s.resumed_at for s in found if s.resumed_at is not None}
    steps.update(step for s in found for _, last, step in s.cuts if s.cap is None or last <= s.cap)
    return sorted(steps)


def page(
    found: list[Segment], since: int, limit: int, size: Callable[[Segment], int], read: ReadPage
) -> tuple[list[RunPoint], int, bool]:
    """Up to ``limit`` points from offset ``since`` of the files read as one stream (a page goes
    on from one file into the next)."""
    points: list[RunPoint] = []
    base = 0
    for i, seg in enumerate(found):
        last = i == len(found) - 1
        length = 0 if last else size(seg)
        if not last and since >= base + length:
            base += length
            continue
        keep = None if seg.plain else seg.keeps
        got, nxt, more = read(seg.job_dir, seg.parts, max(since - base, 0), limit - len(points), keep)
        points += got
        if more or last or len(points) >= limit:
            return points, base + nxt, more or not last
        base += length  # this file is read to its end: on into the next
        since = base
    return points, since, False
