"""What a polled runs listing costs while runs grow.

The runs table polls ``GET disttrain/api/runs`` every few seconds. ``RunsReader`` remembers how far
it read each ``metrics.jsonl`` and reads only what was appended since; the plain alternative reads
and parses every file whole on every poll. Both are timed on the same job directory: ``--runs``
runs of ``--points`` points each, then polls that each follow ``--append`` new points per run.
Also timed: the first listing (bounded to the newest 2 MiB of each file) and one detail page.

    python bench/bench_runs.py [--runs 20] [--points 200000] [--append 1000] [--polls 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.tracking.runs import CATCH_UP_BYTES, RunsReader, parse_lines


def point_lines(start: int, count: int) -> str:
    return "".join(
        f'{{"type":"train","name":"loss","value":{1 / (i + 1)!r},"step":{i},"epoch":0,"time":{1e9 + i}}}\n'
        for i in range(start, start + count)
    )


def make_job(root: Path, runs: int, points: int) -> Path:
    job = root / "bench-abcde"
    for r in range(runs):
        run = job / "runs" / f"run{r}"
        run.mkdir(parents=True)
        (run / "run.json").write_text(
            json.dumps({"name": f"run{r}", "hparams": {"lr": 0.1}, "status": "running"})
        )
        (run / "metrics.jsonl").write_text(point_lines(0, points))
    return job


def append(job: Path, runs: int, start: int, count: int) -> None:
    text = point_lines(start, count)
    for r in range(runs):
        with open(job / "runs" / f"run{r}" / "metrics.jsonl", "a") as f:
            f.write(text)


def naive(job: Path) -> dict[str, dict[str, object]]:
    """Every file read and parsed whole: the last value of each metric."""
    out: dict[str, dict[str, object]] = {}
    for path in sorted((job / "runs").glob("*/metrics.jsonl")):
        last: dict[str, object] = {}
        for p in parse_lines(path.read_bytes().splitlines()):
            last[f"{p.type}/{p.name}"] = p.value
        out[path.parent.name] = last
    return out


def timed(fn: object, *args: object) -> float:
    t = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--append", type=int, default=1000)
    parser.add_argument("--polls", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        job = make_job(Path(tmp), args.runs, args.points)
        size = sum(p.stat().st_size for p in job.glob("runs/*/metrics.jsonl"))
        reader = RunsReader()

        def listing() -> None:
            reader.summaries(job, "bench-abcde", "bench", JobPhase.RUNNING, "bench-abcde")

        first = timed(listing)
        ours, plain = [], []
        start = args.points
        for _ in range(args.polls):
            append(job, args.runs, start, args.append)
            start += args.append
            ours.append(timed(listing))
            plain.append(timed(naive, job))
        got = {
            s.run: s.metrics["train/loss"]
            for s in reader.summaries(job, "bench-abcde", "bench", JobPhase.RUNNING, None)
        }
        assert got == {k: v["train/loss"] for k, v in naive(job).items()}, "the two disagree"
        page = timed(reader.detail, job, "bench-abcde", "run0", JobPhase.RUNNING, 0, 5000)
        print(f"{args.runs} runs x {args.points:,} points ({size / 2**20:.0f} MiB of metrics.jsonl)")
        print(f"first listing (newest {CATCH_UP_BYTES >> 20} MiB of each file): {first * 1e3:.0f} ms")
        ours_ms, plain_ms = statistics.median(ours) * 1e3, statistics.median(plain) * 1e3
        print(
            f"polled listing after {args.append:,} new points per run: {ours_ms:.1f} ms;"
            f" reading every file whole: {plain_ms:.0f} ms ({plain_ms / ours_ms:.0f}x)"
        )
        print(f"one detail page (5,000 points): {page * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
