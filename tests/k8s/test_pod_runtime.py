"""The pods run this notebook's release of the runtime, and the pod wrapper's notices are in the
job's logs (issue 34, items 14 and 15): an image holding an older ``jupyter_disttrain`` still
resumes a replaced pod from the job's checkpoint, and says so where the user reads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.podruntime import ARCHIVE, PACKAGE
from jupyter_disttrain.model.specs import JobPhase

from .conftest import ddp_spec, start_toy, wait_for
from .toycluster import PODS, ToyCluster

# An image's jupyter_disttrain of an earlier release: a rank wrapper that runs the script and
# knows nothing of restarts, no restarts module, no MLflow follower; and no usable psutil.
OLD_RELEASE = {
    "jupyter_disttrain/__init__.py": '__version__ = "0.1.0"\n',
    "jupyter_disttrain/runtime/__init__.py": "",
    "jupyter_disttrain/runtime/worker.py": (
        "import runpy, sys\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
    ),
    "psutil.py": "raise ImportError('psutil does not work in this image')\n",
}

# Saves a checkpoint and waits to be evicted the first time; says what it resumes from.
SAVED_THEN_EVICTED = """
import os, pathlib, pickle, time
print("resume_from", os.environ.get("DISTTRAIN_RESUME_FROM"), flush=True)
if "DISTTRAIN_RESUME_FROM" not in os.environ:
    ckpt = pathlib.Path(os.environ["DISTTRAIN_CHECKPOINT_DIR"]) / "step_5.pt"
    ckpt.write_bytes(pickle.dumps({"step": 5}))
    (pathlib.Path(os.environ["DISTTRAIN_JOB_DIR"]) / "started").write_text("1")
    time.sleep(120)
"""


@pytest.fixture
def old_image(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    site = tmp_path / "old-image-site"
    for name, text in OLD_RELEASE.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    yield from start_toy(monkeypatch, tmp_path, image_env={"pytorch:local": {"PYTHONPATH": str(site)}})


def test_a_replaced_pod_resumes_with_an_older_release_in_the_image_and_says_so(
    old_image: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    job_id = backend.submit(ddp_spec(workspace, nodes=1, options={"flavor": "job"}), SAVED_THEN_EVICTED)
    job_dir = backend.store.job_dir(job_id)
    assert (job_dir / ARCHIVE).is_file()  # shipped beside the script, on the PVC
    wait_for(backend, job_id, lambda s: (job_dir / "started").exists() or s.is_terminal)
    (pod,) = [p for p in old_image.cluster.items(PODS) if p["metadata"]["name"].startswith(job_id)]
    old_image.kubelet.evict(pod["metadata"]["namespace"], pod["metadata"]["name"])
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    lines = [ln.text for ln in backend.logs(job_id)]
    assert status.phase is JobPhase.SUCCEEDED, (status.message, lines)
    checkpoint = job_dir / "checkpoints" / "step_5.pt"
    said = [t for t in lines if "resume_from" in t]
    assert said == ["[rank0]:resume_from None", f"[rank0]:resume_from {checkpoint}"], lines
    # The wrapper's own notices are in the job's log (the PVC file), not only in pods/log.
    for notice in (
        f"jupyter-disttrain: restarted: DISTTRAIN_RESUME_FROM={checkpoint} (step 5)",
        "jupyter-disttrain: no resource samples: psutil is not installed in this image",
        "jupyter-disttrain: MLflow metrics are not written into TensorBoard: ",
    ):
        assert any(t.startswith(notice) for t in lines), (notice, lines)
    # Once per pod, its exit record says whether the ranks ran under the rank wrapper, and whose.
    record = json.loads((job_dir / "exits" / "node-0.json").read_text())
    assert record["rank_wrapper"].startswith(f"{PACKAGE}.worker, this job's own release")
