"""What ``--max-restarts`` does in each flavour (issue 10, item 10; docs/kubernetes.md "Restarts"):
the Indexed Job replaces a failed pod (``backoffLimit``), a PyTorchJob restarts its container in
place (``restartPolicy: OnFailure``); both with a fresh torchrun, so the script starts over."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.specs import JobPhase

from .conftest import ddp_spec, start_toy, wait_for
from .test_control_loop import backend_store

# Fails the first time (a transient error), works when run again: the marker is on the shared PVC.
ONCE = """
import os, pathlib, sys
marker = pathlib.Path(os.environ["DISTTRAIN_JOB_DIR"]) / "tried"
if not marker.exists():
    marker.write_text("1")
    sys.exit(3)
print("second run ok", flush=True)
"""


@pytest.mark.parametrize("max_restarts", [1, 0])
@pytest.mark.parametrize("flavor", ["job", "pytorchjob"])
def test_a_transient_failure_is_retried_with_max_restarts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path, flavor: str, max_restarts: int
) -> None:
    gen = start_toy(monkeypatch, tmp_path, install=(flavor,) if flavor != "job" else ())
    next(gen)
    try:
        backend = KubernetesBackend(backend_store(workspace))
        spec = ddp_spec(workspace, nodes=1, max_restarts=max_restarts, options={"flavor": flavor})
        job_id = backend.submit(spec, ONCE)
        workload = backend.store.read_record(job_id).request["manifests"][-1]
        if flavor == "job":  # a failed pod is replaced by a new one (same index, same hostname)
            pod_policy = workload["spec"]["template"]["spec"]["restartPolicy"]
            assert (workload["spec"]["backoffLimit"], pod_policy) == (max_restarts, "Never")
        else:  # the operator's pods restart their container in place
            master = workload["spec"]["pytorchReplicaSpecs"]["Master"]
            assert master["restartPolicy"] == ("OnFailure" if max_restarts else "Never")
            assert workload["spec"]["runPolicy"]["backoffLimit"] == max_restarts
        status = wait_for(backend, job_id, lambda s: s.is_terminal)
        (replica,) = status.replicas
        if max_restarts:
            assert status.phase is JobPhase.SUCCEEDED, status.message
            assert replica.restarts == 1  # a replaced pod or a restarted container: counted alike
            assert any("second run ok" in ln.text for ln in backend.logs(job_id))
        else:
            assert (status.phase, replica.exit_code) == (JobPhase.FAILED, 3), status.message
    finally:
        gen.close()
