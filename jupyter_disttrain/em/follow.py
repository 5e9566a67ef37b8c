"""The TensorBoard follower: a companion process that turns a run's ``metrics.jsonl`` into events.

Writing an event costs ~40 us of Python per scalar (protobuf, a pure-Python CRC-32C, a queue),
and inside the training process that work holds the GIL against the training loop (+25 % on a
1 ms step at 1,000 logs/s, measured by ``bench/bench_em.py``). Here it costs the training
process nothing: the file is the source of truth and this process follows it.

    main([METRICS_JSONL, TENSORBOARD_DIR])  (started by ``start_follower``)

stdin: first line ``{"hparams": {...}}``, later ``{"end": "finished"|"failed"}``. When the run
ends (or its process dies: stdin closes) it reads the file to its end, writes the hparams
experiment with the final values and exits. It leads its own session, and SIGTERM and SIGINT are
ignored: torchrun's signals to the rank's group must not cut the last points off; the closed
pipe ends this process.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..runtime.contract import FOLLOWER_ENTRY

log = logging.getLogger(__name__)

POLL = 0.5  # seconds between reads of the metrics file
END_WAIT = 60.0  # seconds a run's end waits for its last events
# The directory that holds the package, for the follower's import: the training script may have
# found it through a sys.path entry that a fresh interpreter would not have.
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def start_follower(metrics: Path, logdir: Path, hparams: Mapping[str, Any]) -> subprocess.Popen[bytes] | None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", FOLLOWER_ENTRY, str(metrics), str(logdir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
            # Out of the rank's process group: torchrun SIGKILLs that group 30 s after a peer's
            # failure, and a follower still starting (importing torch on a busy machine) would
            # take the crashed run's events with it. It ends by itself once the rank is gone.
            start_new_session=True,
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"hparams": hparams}, default=str).encode() + b"\n")
        proc.stdin.flush()
    except OSError as exc:  # no TensorBoard is no reason to stop training
        log.error("em: could not start the TensorBoard writer for %s: %s", metrics.parent, exc)
        return None
    return proc


def stop_follower(proc: subprocess.Popen[bytes] | None, status: str) -> None:
    """Tell the follower the run ended (after the last points are in the file); wait for it."""
    if proc is None or proc.stdin is None:
        return
    try:
        proc.stdin.write(json.dumps({"end": status}).encode() + b"\n")
        proc.stdin.close()
        proc.wait(timeout=END_WAIT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.error("em: the TensorBoard writer did not finish: %s", exc)


class Follower:
    """Whole new lines of a growing JSONL file, from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._counts: dict[str, int] = {}
        self.last: dict[str, float] = {}

    def points(self) -> Iterator[tuple[str, float, int, float]]:
        """(tag, value, step, wall time) of every point written since the last call."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        self._offset += end
        for line in data[:end].splitlines():
            yield self._point(json.loads(line))

    def _point(self, record: dict[str, Any]) -> tuple[str, float, int, float]:
        tag = f"{record['type']}/{record['name']}"
        value = float(record["value"])  # "NaN", "Infinity" and "-Infinity" too
        count = self._counts.get(tag, 0)
        self._counts[tag] = count + 1
        self.last[tag] = value
        step = record["step"]
        return tag, value, count if step is None else step, record["time"]


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    metrics, logdir = Path(argv[0]), Path(argv[1])
    hparams = json.loads(sys.stdin.readline() or "{}").get("hparams", {})
    try:
        from .tb import TensorBoard

        tensorboard = TensorBoard(logdir, hparams)
    except ImportError as exc:
        sys.exit(
            f"em: no TensorBoard event file for {metrics.parent.name} ({exc}); metrics.jsonl has every point"
        )
    follower = Follower(metrics)
    status = None
    while status is None:
        if select.select([sys.stdin], [], [], POLL)[0]:
            line = sys.stdin.readline()
            status = json.loads(line).get("end", "failed") if line.strip() else "failed"
        tensorboard.scalars(follower.points())
        tensorboard.flush()
    tensorboard.close(follower.last, finished=status == "finished")


if __name__ == "__main__":
    main(sys.argv[1:])
