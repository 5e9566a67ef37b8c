"""A job's checkpoints where its pods can reach them (issue 34, item 16): ``--resume`` from a
checkpoint no mounted claim holds is refused, naming ``--pvc``; a job dir off the PVC says that
its checkpoints die with the pods, in the dry run and as an event."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase, ResumedFrom

from .conftest import ddp_spec, wait_for
from .toycluster import ToyCluster


def resumed(path: Path) -> ResumedFrom:
    return ResumedFrom("old-k2p9x", "step_5.pt", 5, "torch", str(path), str(path.parent.parent))


def test_a_resume_from_a_checkpoint_the_pods_cannot_see_is_refused(
    backend: KubernetesBackend, workspace: Path, tmp_path: Path
) -> None:
    spec = ddp_spec(workspace, options={"flavor": "job"}, resume="old-k2p9x:5")
    elsewhere = tmp_path / "laptop" / "old-k2p9x" / "checkpoints" / "step_5.pt"
    with pytest.raises(InvalidSpecError) as err:
        backend.dryrun(dataclasses.replace(spec, resumed_from=resumed(elsewhere)))
    message = str(err.value)
    assert message.startswith("--resume old-k2p9x:5: ") and "--pvc CLAIM:PATH" in message
    assert str(elsewhere) in message and "\n" not in message
    on_pvc = workspace / ".disttrain" / "jobs" / "old-k2p9x" / "checkpoints" / "step_5.pt"
    info = backend.dryrun(dataclasses.replace(spec, resumed_from=resumed(on_pvc)))
    env = info.request.manifests[-1]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "DISTTRAIN_RESUME_FROM", "value": str(on_pvc)} in env


# Which runtime the rank runs under: the job ships its own (the image's is not looked at).
WHICH_RUNTIME = """
import sys
print("runtime", sorted(m for m in sys.modules if m.startswith("disttrain_runtime."))[:1], flush=True)
"""


def test_without_a_pvc_checkpoints_are_said_to_die_with_the_pods(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ddp_spec(workspace, nodes=1, volumes=[], working_dir=None, options={"flavor": "job"})
    assert "# checkpoints live only as long as the pods" in backend.dryrun(spec).text
    job_id = backend.submit(spec, WHICH_RUNTIME)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    (event,) = [e for e in status.events if e.reason == "ScratchCheckpoints"]
    assert event.type == "Warning" and "--pvc" in event.message
    # The ConfigMap shipped the runtime beside the script: the rank ran under its rank wrapper.
    assert any("runtime ['disttrain_runtime.atomic']" in ln.text for ln in backend.logs(job_id))
