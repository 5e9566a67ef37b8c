"""What following MLflow into TensorBoard costs (``mlflowtb``, a thread of the job's launcher).

- idle: one poll of a job that does not use MLflow (no ``mlflow.db``), and of one whose database
  has no new rows: the launcher's cost per second while the job runs;
- per point: the follower's CPU per point written (read by rowid, ``add_scalar``, flush) against
  MLflow's own CPU per ``mlflow.log_metric`` in the training process (the plain alternative: what
  the user already pays for each point), as a ratio;
- the first point: importing the writer (``torch.utils.tensorboard``) and the launcher's RSS growth.

    python bench/bench_mlflowtb.py [--points 20000]

Writes under a temporary directory, removed at the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path


def per_call(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        job_dir = Path(tmp)
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{job_dir / 'mlflow.db'}"
        from jupyter_disttrain.tracking.mlflowtb import MlflowTensorBoard

        follower = MlflowTensorBoard(job_dir, job_dir / "tensorboard", print)
        idle_none = per_call(lambda: follower.follow(batches=5), 2000)

        import mlflow
        from mlflow.entities import Metric

        with mlflow.start_run(run_name="bench") as run:
            step = iter(range(10**9))
            one = per_call(lambda: mlflow.log_metric("loss", 0.5, step=next(step)), 300)
            client = mlflow.MlflowClient()
            now = int(time.time() * 1000)
            for start in range(300, args.points, 1000):
                batch = [Metric("loss", 0.5, now, s) for s in range(start, min(start + 1000, args.points))]
                client.log_batch(run.info.run_id, metrics=batch)

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401  (the first point's import)

        imported = time.perf_counter() - t0
        start = time.process_time()
        written = follower.follow(batches=None)
        per_point = (time.process_time() - start) / written
        idle_db = per_call(lambda: follower.follow(batches=5), 500)
        follower.stop()
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024

    print(f"idle poll, no mlflow.db:          {idle_none * 1e6:8.1f} us (once a second)")
    print(f"idle poll, no new rows:           {idle_db * 1e6:8.1f} us (once a second)")
    print(f"follower CPU per point:           {per_point * 1e6:8.1f} us ({written} points)")
    print(f"mlflow.log_metric CPU per point:  {one * 1e6:8.1f} us (in the training process)")
    print(f"ratio follower / log_metric:      {per_point / one:8.3f}")
    print(f"first point: writer import {imported:.2f} s, launcher max RSS +{grown:.0f} MiB")


if __name__ == "__main__":
    main()
