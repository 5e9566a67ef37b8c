"""A PyTorch Lightning DDP cell runs unchanged under ``%%distrun --gpus 2`` in a real kernel (2 CPU
ranks, gloo), and the checks before launch warn about a Trainer that disagrees with the flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.notebook_helpers import run_cells
from tests.test_launch_env import LIGHTNING_MODEL

pytest.importorskip("lightning", reason="Lightning is not installed (the test extra installs it)")

FIT = """%%distrun --gpus 2 --name lightning-ddp{flags}
trainer = L.Trainer(strategy="{strategy}", accelerator="cpu", devices={devices}, max_epochs=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
model = Model()
trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=2))
print(f"rank={{trainer.global_rank}} world_size={{trainer.world_size}} batches={{model.batches}}")
"""


@pytest.mark.timeout(600)
def test_a_lightning_ddp_cell_runs_unchanged_and_a_mismatched_trainer_is_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "jobs"
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(root))  # the kernel inherits it
    cells = [
        "%load_ext jupyter_disttrain",
        LIGHTNING_MODEL,
        FIT.format(flags=" --dry-run", strategy="ddp_notebook", devices=4),
        FIT.format(flags="", strategy="ddp", devices=2),
    ]
    printed = run_cells(cells, tmp_path)
    warned = printed[2]
    assert "warning: line 2: Trainer(devices=4) but the job runs --gpus 2" in warned
    assert "[silence: --no-check lightning-devices]" in warned
    assert "strategy='ddp_notebook' starts its own processes" in warned
    assert "warning:" not in printed[3]
    store = JobStore(root)
    (record,) = store.records()  # the dry run launched nothing
    job = api.get_job(record.id, store)
    status = job.status()
    assert status.phase is JobPhase.SUCCEEDED, f"{status.reason}: {status.message}"
    said = sorted(ln.text for ln in job.logs() if ln.text.startswith("rank="))
    # Each of the 2 ranks fits half of the 8 batches.
    assert said == ["rank=0 world_size=2 batches=4", "rank=1 world_size=2 batches=4"]
