"""API requests per status refresh of the Kubernetes backend, as the number of jobs grows.

A fake cluster (tests/k8s/fakeapi.py, the real HTTP protocol, the real ``kubernetes`` client)
holds up to 200 jobs x 8 pods. A "refresh" is what the Jupyter server does to draw the job list:
``backend.list()``, the status of every job. Statuses come from the shared informers (one watch
per namespace and kind), so the requests per refresh must not grow with the number of jobs.

    python bench/bench_k8s_scale.py [--jobs 200] [--pods 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_disttrain.backends.kubernetes import KubernetesBackend  # noqa: E402
from jupyter_disttrain.backends.kubernetes.informer import all_informers, stop_all  # noqa: E402
from jupyter_disttrain.model.specs import JobPhase, JobSpec, Volume  # noqa: E402
from jupyter_disttrain.storage.store import JobStore  # noqa: E402
from tests.k8s.fakeapi import FakeApiServer, FakeCluster  # noqa: E402

NS = "team-a"


def add_pods(cluster: FakeCluster, job_id: str, pods: int, phase: str) -> None:
    """What the Job controller and kubelet would have made: ``pods`` indexed pods, in ``phase``."""
    job = cluster.get("batch/v1/jobs", NS, job_id)
    assert job is not None
    for idx in range(pods):
        labels = dict(job["spec"]["template"]["metadata"]["labels"])
        labels.update(
            {"batch.kubernetes.io/job-completion-index": str(idx), "batch.kubernetes.io/job-name": job_id}
        )
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job_id, "uid": job["metadata"]["uid"]}
        pod = {
            "metadata": {
                "name": f"{job_id}-{idx}-abcde",
                "labels": labels,
                "ownerReferences": [owner],
                "annotations": {"batch.kubernetes.io/job-completion-index": str(idx)},
            },
            "spec": job["spec"]["template"]["spec"],
            "status": {"phase": phase},
        }
        cluster.create("/v1/pods", NS, pod)


def refresh(backend: KubernetesBackend, cluster: FakeCluster) -> tuple[int, float, int]:
    before = len(cluster.requests)
    t0 = time.perf_counter()
    statuses = backend.list()
    elapsed = time.perf_counter() - t0
    running = sum(1 for s in statuses if s.phase is JobPhase.RUNNING)
    return len(cluster.requests) - before, elapsed, running


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--pods", type=int, default=8)
    args = ap.parse_args()

    cluster = FakeCluster((1, 33))
    with FakeApiServer(cluster) as server, tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "kubeconfig"
        cfg.write_text(yaml.safe_dump(server.kubeconfig(NS)))
        os.environ["KUBECONFIG"] = str(cfg)
        ws = Path(tmp) / "ws"
        ws.mkdir()
        backend = KubernetesBackend(JobStore(ws / ".disttrain" / "jobs"))
        spec = JobSpec(
            name="scale",
            backend="kubernetes",
            nodes=args.pods,
            nproc_per_node=8,
            image="pytorch:2.13",
            volumes=[Volume("workspace", str(ws))],
            options={"flavor": "job", "namespace": NS},
        )
        print(f"fake cluster at {server.url}; {args.jobs} jobs x {args.pods} pods; requests per refresh:")
        print(f"{'jobs':>6} {'pods':>6} {'requests':>9} {'naive':>7} {'ms/refresh':>11} {'running':>8}")
        sizes = sorted({n for n in (1, 25, 50, 100, args.jobs) if n <= args.jobs})
        made = 0
        rows = []
        for n in sizes:
            while made < n:
                job_id = backend.submit(spec, "print('hi')\n")
                add_pods(cluster, job_id, args.pods, "Running")
                made += 1
            refresh(backend, cluster)  # first sight of new jobs (and the informers' first lists)
            time.sleep(0.2)  # let the watches deliver the last pods
            refresh(backend, cluster)
            reqs, elapsed, running = refresh(backend, cluster)
            naive = 3 * n  # per job: get the workload, list its pods, list its events
            rows.append(reqs)
            print(f"{n:>6} {n * args.pods:>6} {reqs:>9} {naive:>7} {elapsed * 1000:>11.1f} {running:>8}")
        informers = all_informers()
        print(
            f"watches: {len(informers)} informers ({', '.join(sorted(i.res.plural for i in informers))}), "
            f"{sum(i.lists for i in informers)} lists and "
            f"{sum(i.watches for i in informers)} watch requests in total"
        )
        print(
            f"requests per refresh, smallest vs largest job count: {rows[0]} vs {rows[-1]} (ratio "
            f"{(rows[-1] / rows[0]) if rows[0] else float(rows[-1] == 0):.2f}; 1.00 or 0 requests = flat)"
        )
        stop_all()


if __name__ == "__main__":
    main()
