"""notebooks/kubernetes.ipynb runs top to bottom with no cluster and shows every flavour's YAML."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import yaml
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "kubernetes.ipynb"


def test_kubernetes_notebook_dry_runs_without_a_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(tmp_path / ".disttrain" / "jobs"))
    for var in ("KUBERNETES_SERVICE_HOST", "POD_NAME", "POD_NAMESPACE", "DISTTRAIN_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    text = "\n".join(
        out.get("text", "") or str(out.get("data", {}).get("text/plain", ""))
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )
    # No error output, traceback or one-line refusal (the YAML itself may name exceptions: the pod
    # wrapper's source handles FileNotFoundError).
    assert not any(out.output_type == "error" for cell in nb.cells for out in cell.get("outputs", []))
    assert "Traceback" not in text and "UsageError" not in text
    assert not [ln for ln in text.splitlines() if ln.startswith(("%%distrun:", "%distrun:"))]
    for kind in ("kind: Service", "kind: Job", "kind: PyTorchJob", "PyTorchTrainingJob"):
        assert kind in text
    # The first dry run's YAML is complete and parses back.
    first = next(c for c in nb.cells if "--flavor job" in c.source)
    out = "".join(o.get("text", "") for o in first.outputs)
    launch = out.split("launch request (kubernetes backend) ----\n", 1)[1]
    docs = list(yaml.safe_load_all(launch))
    assert [d["kind"] for d in docs] == ["Service", "Job"]
    assert (
        docs[1]["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "workspace"
    )
    jobs = tmp_path / ".disttrain" / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())  # a dry run creates nothing
