"""The debugging views of a job forked in a Kubernetes pool (issue 36: "identical in every view to
a cold job"), on one pool of two pods on the toy cluster: its stacks (py-spy of this job's rank in
each pod only, not the pool server's or the zygote's), which rank is stuck (the Flight Recorder
through the job's own sockets), a rank's ``breakpoint()`` answered from here, and the pool listed
and released from a namespace other than the default one, past a namespace the listing may not
read."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from jupyter_disttrain import api
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.jobs.manager import manager_for
from jupyter_disttrain.model.specs import JobPhase
from tests.prompt_helpers import PROMPT_SCRIPT, check_values_back, follow_answering
from tests.test_diagnosis import LATE_SCRIPT, LATE_VERDICT

from .conftest import ddp_spec, wait_for
from .test_pools import wait_until
from .toycluster import ToyCluster

KEEP = {"keep_warm": "60", "namespace": "team-b"}  # the kubeconfig's namespace is team-a


def started(backend: KubernetesBackend, job_id: str) -> str:
    (line,) = [e.message for e in backend.describe(job_id).events if e.reason == "Started"]
    return line


def test_a_forked_jobs_stacks_verdict_and_debugger_and_its_pool_in_another_namespace(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ddp_spec(workspace, nodes=2, nproc_per_node=1, options=KEEP)  # a rank in each pool pod
    first = backend.submit(spec, "print('first')")
    assert wait_for(backend, first, lambda s: s.is_terminal).phase is JobPhase.SUCCEEDED
    manager = manager_for(backend.store)
    wait_until(lambda: [p.releases_in is not None for p in manager.pools.list_pools().pools] == [True])
    (pool,) = manager.pools.list_pools().pools
    assert (pool.id, pool.namespace) == (first, "team-b")

    # A job forked in the pool's pods, rank 1 late to all_reduce #5: each pod's stacks are this
    # job's rank there (named once), and the verdict is a cold job's.
    late = backend.submit(spec, LATE_SCRIPT)
    assert "forked in pool pods" in started(backend, late)
    wait_for(backend, late, lambda s: any("step 3" in ln.text for ln in backend.logs(late)), 120)
    time.sleep(0.5)  # rank 0 enters all_reduce #5
    for node, rank, frame in (
        ("node-0", "rank-0", "<module> (train.py:12)"),
        ("node-1", "rank-1", "late (train.py:6)"),
    ):
        dump = backend.stack(late, node)
        names = re.findall(r"^==== (\S+) \(pid \d+\) ====$", dump.text, re.M)
        assert sorted(set(names) - {node}) == [rank] and len(set(names)) == len(names), names
        assert frame in dump.text, dump.text
    incident = manager.diagnoses.diagnose(late)
    assert incident.verdict == LATE_VERDICT
    assert backend.cancel(late).phase is JobPhase.CANCELLED
    wait_until(lambda: [p.jobs for p in manager.pools.list_pools().pools] == [[]])

    # A forked job's rank 1 stops in breakpoint(): its prompt is answered from here, the job goes
    # on, and its values come back.
    out = ddp_spec(
        workspace, nodes=2, nproc_per_node=1, options=KEEP, out=["model", "losses"], out_all=["rank"]
    )
    job = api.Job(backend.submit(out, PROMPT_SCRIPT), backend.store)
    assert "forked in pool pods" in started(backend, job.id)
    status, said = follow_answering(job, (None, "p x", "c"))
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert said[0].open and said[1].output == "41\n(Pdb) " and not said[2].open
    check_values_back(job)

    # The default namespace may not be listed: a note, and team-b's pool is still listed; it is
    # released in its own namespace.
    toy.cluster.denied.add(("list", "pods", "team-a"))
    listing = manager.pools.list_pools()
    assert [p.id for p in listing.pools] == [first]
    (note,) = listing.errors
    assert note.startswith("kubernetes: the warm pools of namespace team-a cannot be listed: "), note
    assert "may not list pods in namespace 'team-a'" in note, note
    # The pool server's private dir (its socket, its zygote's, named for the pod's hostname) goes
    # with it: the toy cluster's pods share this machine's /tmp, and none may leave a dir there.
    private = [private_dir(toy, node.step) for node in pool.nodes]
    assert len(private) == 2 and all(p.is_dir() for p in private)
    assert manager.pools.release(first).released
    assert manager.pools.list_pools().pools == []
    wait_until(lambda: not any(p.exists() for p in private))


def private_dir(toy: ToyCluster, pod: str) -> Path:
    """A pool pod's private dir, as its relay finds it from the pod's environment."""
    env = toy.kubelet.exec_env[("team-b", pod)][0]
    base = env.get("XDG_RUNTIME_DIR")
    root = Path(base, "jupyter_disttrain") if base else Path(f"/tmp/jupyter_disttrain-{os.getuid()}")
    return root / f"k8s-{env['HOSTNAME']}"[:60]
