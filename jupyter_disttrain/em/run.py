"""A run: its record (``run.json``), its metrics (``metrics.jsonl``, TensorBoard) and its artifacts.

Every method is safe on every rank: a rank that does not record gets a run whose calls do
nothing, so the training script needs no ``if rank == 0:``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import types
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Literal

from ..runtime.contract import ARTIFACTS_DIR, CHECKPOINTS_FILE, METRICS_FILE, RUN_FILE
from ..runtime.secrets import masked
from . import exits, resume
from .artifact import Artifact
from .checks import (
    METRIC_TYPES,
    check_metric_name,
    check_name,
    check_step,
    check_type,
    json_number,
    metric_value,
)
from .files import append_text, read_record, write_json
from .follow import start_follower, stop_follower
from .place import Place, platform_info
from .sink import Sink

log = logging.getLogger(__name__)


Ranks = Literal["0", "all"]
_said: set[str] = set()


def say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        log.warning(message)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Run:
    """Created by ``em.create_run``; ``with em.create_run(...) as run:`` finishes it (``failed``
    when the block raises)."""

    def __init__(
        self,
        name: str,
        hparams: Mapping[str, Any] | None,
        description: str | None,
        ranks: Ranks,
        place: Place,
        *,
        total_steps: int | None = None,
    ) -> None:
        self.name = check_name("run", name)
        total_steps = check_step("total_steps", total_steps)
        if ranks not in ("0", "all"):
            raise ValueError(f"ranks={ranks!r}: use '0' (rank 0 records) or 'all' (each rank, in rank-N/)")
        if hparams is not None and not isinstance(hparams, Mapping):
            raise TypeError(f"hparams: a dict of name to value is needed, not a {type(hparams).__name__}")
        self.dir = place.runs / self.name
        # Recorded in run.json and TensorBoard: credentials' values never are (runtime/secrets.py).
        self.hparams: dict[str, Any] = masked(dict(hparams or {}))
        self.rank = place.rank
        # The record and the artifacts are rank 0's; ranks="all" adds every rank's own metrics.
        self.active = place.rank == 0 or ranks == "all"
        self._owner = place.rank == 0
        self._lock = threading.RLock()  # SIGTERM may end the run inside the main thread's _end
        self._last_step: dict[str, int] = {}
        self._names: set[str] = set()
        self._final: dict[str, float] = {}
        self._record: dict[str, Any] = {}
        if not self.active:
            return
        per_rank = "" if ranks == "0" else f"rank-{place.rank}"
        metrics_dir = self.dir / per_rank
        metrics_dir.mkdir(parents=True, exist_ok=True)
        self._sink = Sink(metrics_dir / METRICS_FILE)
        continued = self._continued(place) if self._owner else {}
        self._follower = start_follower(
            self._sink.path, place.tensorboard / self.name / per_rank, self.hparams
        )
        if self._owner:
            self._record = {
                "name": self.name,
                "hparams": self.hparams,
                "description": description,
                "status": "running",
                "start_time": _iso(time.time()),
                "end_time": None,
                "reason": None,
                "ranks": ranks,
                "total_steps": total_steps,
                "platform": platform_info(place, place.world_size if ranks == "all" else 1),
                "outputs": [],
                "inputs": [],
                **continued,
            }
            self._save()
        exits.track(self)

    def _continued(self, place: Place) -> dict[str, Any]:
        """What the record keeps of a run this one continues. ``resumed_from`` {job, run, step}:
        the run it continues from a checkpoint (another job's, on ``--resume``); ``restarts``:
        each time this job's ranks restarted from a checkpoint, where the metrics file was then
        (``offset``) and the checkpoint's ``step``: the runs view drops the earlier attempt's
        points past that step, so no step shows twice."""
        earlier = read_record(self.dir / RUN_FILE) or {}
        kept: dict[str, Any] = {k: earlier[k] for k in ("resumed_from", "restarts") if k in earlier}
        point = resume.resumed_point(self.dir, self.name)
        if point is None:
            return kept
        if point["job"] != place.job_id:
            return {**kept, "resumed_from": point}
        restarts = kept["restarts"] if isinstance(kept.get("restarts"), list) else []
        offset = self._sink.path.stat().st_size if self._sink.path.exists() else 0
        return {**kept, "restarts": [*restarts, {"offset": offset, "step": point["step"]}]}

    def __repr__(self) -> str:
        return f"Run({self.name!r}, rank={self.rank}, recording={self.active})"

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        if kind is None:
            self.finish()
        else:
            self._end("failed", exits.reason_of(exc) if exc is not None else kind.__name__)

    def log(
        self, type: str, metrics: Mapping[str, Any], step: int | None = None, epoch: int | None = None
    ) -> None:
        """Record ``metrics`` (name to number) of ``type`` (train, val or test). Returns at once:
        the points are written by a background thread."""
        if not self.active:
            return
        if type not in METRIC_TYPES:
            check_type(type)
        if metrics.__class__ is not dict and not isinstance(metrics, Mapping):
            raise TypeError(
                f"metrics: a dict of name to number is needed (e.g. {{'loss': 0.25}}): {metrics!r}"[:200]
            )
        # The common cases (an int step, a float value, a name seen before) skip the checks'
        # function calls: this runs once per metric per training step.
        if step is not None and step.__class__ is not int:
            step = check_step("step", step)
        if epoch is not None and epoch.__class__ is not int:
            epoch = check_step("epoch", epoch)
        points = [
            (k if k in self._names else self._new_name(k), v if v.__class__ is float else metric_value(k, v))
            for k, v in metrics.items()
        ]
        now = time.time()
        backwards = False
        if step is not None:
            backwards = step < self._last_step.get(type, step)
            self._last_step[type] = step
        for name, value in points:
            self._final[f"{type}/{name}"] = value
            self._sink.put((type, name, value, step, epoch, now, backwards))

    def _new_name(self, name: str) -> str:
        self._names.add(check_metric_name(name))
        return name

    def finish(self) -> None:
        """Write every point and mark the run finished. Calling it again does nothing."""
        self._end("finished", None)

    def mark_output(self, artifact: Artifact) -> None:
        self._mark(artifact, "output")

    def mark_input(self, artifact: Artifact) -> None:
        self._mark(artifact, "input")

    def upload(self, *args: Any, **kwargs: Any) -> None:
        """Does nothing: the run is already in the job directory, where JupyterLab reads it."""
        say_once("em: Run.upload() does nothing here: the run is recorded in the job directory")

    def checkpoint(self, path: str | os.PathLike[str], step: int | None = None) -> None:
        """Declare a checkpoint saved at ``path`` (a file or a directory, anywhere) after
        ``step``: the job lists it with those in its checkpoint dir, and a resume from it knows
        its step. Rank 0's call records (every rank's with ``ranks="all"``); one line appended to
        ``runs/<run>/checkpoints.jsonl`` at once."""
        if not self.active:
            return
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"checkpoint: path must be a str or a path, not {type(path).__name__}")
        step = check_step("step", step)
        entry = {"path": os.path.abspath(os.fspath(path)), "step": step, "time": _iso(time.time())}
        append_text(self.dir / CHECKPOINTS_FILE, json.dumps(entry) + "\n")

    def _mark(self, artifact: Artifact, how: str) -> None:
        if not isinstance(artifact, Artifact):
            raise TypeError(f"mark_{how}: an artifact from em.create_artifact() is needed, not {artifact!r}")
        artifact._mark(how)
        if self._owner and self._record:
            names = self._record[f"{how}s"]
            if artifact.name not in names:
                names.append(artifact.name)
                self._save()

    def _flush(self) -> None:
        if self.active:
            self._sink.flush()

    def _end(self, status: str, reason: str | None) -> None:
        # Once this run is no longer open, a SIGTERM's handler would not write it: it waits.
        with exits.writing():
            with self._lock:
                if not self.active:
                    return
                self.active = False
            exits.untrack(self)
            self._sink.close()
            if self._owner:
                self._record.update({"status": status, "end_time": _iso(time.time()), "reason": reason})
                self._record["final_metrics"] = {k: json_number(v) for k, v in sorted(self._final.items())}
                self._save()
        # Outside the write: TensorBoard's copy may still be starting, and a SIGTERM need not wait
        # for it (the follower, in its own session, finishes once this process is gone).
        stop_follower(self._follower, status)

    def _save(self) -> None:
        write_json(self.dir / RUN_FILE, self._record)

    def artifact(self, name: str) -> Artifact:
        """A new artifact of this run (what ``em.create_artifact`` makes for the current run)."""
        directory = self.dir / ARTIFACTS_DIR / check_name("artifact", name)
        return Artifact(name, directory, run=self.name, active=self._owner and self.active)
