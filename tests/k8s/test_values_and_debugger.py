"""The notebook as the front end on Kubernetes (issue 37): a toy-cluster job with its job dir on
the PVC brings its ``--out`` values back, its rank 1's ``breakpoint()`` is answered through
``pods/exec`` in that rank's pod, and without a PVC ``--out`` is refused at the dry run."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase
from tests.prompt_helpers import PROMPT_SCRIPT, check_values_back, follow_answering

from .conftest import ddp_spec
from .toycluster import ToyCluster


def test_values_come_back_through_the_pvc_and_a_prompt_through_pods_exec(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ddp_spec(workspace, options={"flavor": "job"}, out=["model", "losses"], out_all=["rank"])
    job = api.Job(backend.submit(spec, PROMPT_SCRIPT), backend.store)
    try:
        status, said = follow_answering(job, (None, "p x", "c"))
        assert status.phase is JobPhase.SUCCEEDED, status.message
        assert said[0].open and said[1].output == "41\n(Pdb) " and not said[2].open
        check_values_back(job)
    finally:
        if not job.status().is_terminal:
            job.cancel()


def test_out_without_the_job_dir_on_a_pvc_is_refused_at_the_dry_run(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ddp_spec(workspace, volumes=[], out=["model"])
    with pytest.raises(
        InvalidSpecError, match=r"^--out: the values come back through the job dir .* \(--pvc CLAIM"
    ):
        backend.dryrun(spec, script=PROMPT_SCRIPT)
    assert backend.store.ids() == []
