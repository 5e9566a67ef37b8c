"""Lightning and DeepSpeed resume without a code change (runtime/libresume.py), for real: 2 CPU
ranks train with em logging each step, a rank is SIGKILLed after a checkpoint, and the job is
resumed from its latest checkpoint by the job layer's resume (what ``POST jobs/<id>/resume``
runs). The script never passes the checkpoint: ``Trainer.fit`` gets it as ``ckpt_path`` and
``engine.load_checkpoint(<checkpoint dir>)`` its tag. The resumed curve continues from the
checkpoint's step (em's points, each step once), and the final weights equal an uninterrupted
run's."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.warm.plan import WARM_ENV
from jupyter_disttrain.jobs.manager import manager_for
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

HERE = str(Path(__file__).resolve().parents[1])

LIGHTNING = """
import os, signal
import torch
import lightning as L
from jupyter_disttrain import em

run = em.create_run("train")

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        run.log("train", {"loss": loss.item()}, step=self.global_step)
        return loss

    def on_train_batch_end(self, outputs, batch, i):
        killing = os.environ.get("KILL") and not em.resume_from()
        if self.global_step == 7 and self.global_rank == 1 and killing:
            run._flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

torch.manual_seed(0)
g = torch.Generator().manual_seed(1)
data = torch.utils.data.TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g))
# No dirpath: the job's checkpoint dir. An epoch is 5 steps (40 samples, 4 a batch, 2 ranks).
every_epoch = L.pytorch.callbacks.ModelCheckpoint(every_n_epochs=1, save_top_k=-1)
trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_steps=15, logger=False,
                    enable_progress_bar=False, enable_model_summary=False, callbacks=[every_epoch])
model = Model()
trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=4))  # no ckpt_path
if trainer.global_rank == 0:
    torch.save(model.state_dict(), os.path.join(os.environ["DISTTRAIN_JOB_DIR"], "final.pt"))
run.finish()
"""

DEEPSPEED = """
import os, signal
import torch
from torch import nn
import deepspeed
from jupyter_disttrain import em

CONFIG = {"train_batch_size": 8, "zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": True,
          "steps_per_print": 1000}
torch.manual_seed(0)
net = nn.Linear(4, 1)
engine, _, _, _ = deepspeed.initialize(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.05),
                                       config=CONFIG)
ckpts = em.checkpoint_dir()
engine.load_checkpoint(ckpts)  # the usual call; on a fresh start there is nothing to load
run = em.create_run("train")
g = torch.Generator().manual_seed(1)
data = [(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)) for _ in range(10)]
rank = engine.global_rank
for step in range(engine.global_steps, 10):
    x, y = data[step]
    loss = nn.functional.mse_loss(engine(x[rank::2]), y[rank::2])
    engine.backward(loss)
    engine.step()
    run.log("train", {"loss": loss.item()}, step=step)
    if step % 3 == 2:
        engine.save_checkpoint(ckpts)  # tag global_step<N>, N steps done
    if step == 7 and rank == 1 and os.environ.get("KILL") and not em.resume_from():
        run._flush()
        os.kill(os.getpid(), signal.SIGKILL)
if rank == 0:
    torch.save(net.state_dict(), os.path.join(os.environ["DISTTRAIN_JOB_DIR"], "final.pt"))
run.finish()
"""


def kill_and_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, **fields: object) -> dict:
    """The uninterrupted job, the killed one and the resumed one, as {name: job id}."""
    store = JobStore(tmp_path / "jobs")
    monkeypatch.setenv("PYTHONPATH", HERE)  # the ranks import this worktree's package
    # Cold starts: a first warm job on a loaded machine can spend its 30 s start budget on the zygote.
    monkeypatch.setenv(WARM_ENV, "0")
    for name in ("PL_TRAINER_DEFAULT_ROOT_DIR", "DISTTRAIN_RESUME_FROM"):
        monkeypatch.delenv(name, raising=False)
    common = {"store": store, "gpus": 2, "accelerator": "cpu", **fields}
    whole = api.submit(script, name="whole", **common)
    killed = api.submit(script, name="killed", env={"KILL": "1"}, **common)
    assert whole.wait(timeout=900).phase is JobPhase.SUCCEEDED, [ln.text for ln in whole.logs()][-30:]
    assert killed.wait(timeout=900).phase is JobPhase.FAILED, [ln.text for ln in killed.logs()][-30:]
    answer = manager_for(store).resume(killed.id, "latest")
    resumed = api.Job(answer.id, store)
    status = resumed.wait(timeout=900)
    assert status.phase is JobPhase.SUCCEEDED, [ln.text for ln in resumed.logs()][-30:]
    return {
        "store": store,
        "whole": whole.id,
        "killed": killed.id,
        "resumed": answer.id,
        "from": answer.checkpoint,
    }


def check_curve_and_weights(
    jobs: dict, resumed_step: int, first_new_step: int, last_step: int, *, exact: bool = True
) -> None:
    import torch

    store: JobStore = jobs["store"]
    manager = manager_for(store)
    assert jobs["from"].step == resumed_step
    resumed = manager.run_detail(jobs["resumed"], "train")
    whole = manager.run_detail(jobs["whole"], "train")
    own = [p.step for p in manager.run_detail(jobs["killed"], "train").points]
    assert max(own) > first_new_step  # the killed job logged past the checkpoint
    assert resumed.record["resumed_from"] == {"job": jobs["killed"], "run": "train", "step": resumed_step}
    assert resumed.resumed_at == [resumed_step]
    assert [p.step for p in resumed.points] == list(range(last_step + 1))  # each step once
    # The new job's own first point is the checkpoint's next step, with the uninterrupted run's
    # loss there (the weights were restored exactly); with ``exact``, the whole curve is its.
    first = (store.job_dir(jobs["resumed"]) / "runs/train/metrics.jsonl").read_text().splitlines()[0]
    assert f'"step":{first_new_step},' in first
    pairs = [(p.step, p.value) for p in resumed.points]
    expected = [(p.step, p.value) for p in whole.points]
    assert pairs[: first_new_step + 1] == expected[: first_new_step + 1]
    if not exact:
        return
    assert pairs == expected
    final, uninterrupted = (torch.load(store.job_dir(jobs[n]) / "final.pt") for n in ("resumed", "whole"))
    assert final.keys() == uninterrupted.keys()
    assert all(torch.equal(final[k], uninterrupted[k]) for k in final)


@pytest.mark.timeout(1800)
def test_lightning_resumes_from_the_latest_ckpt_without_a_ckpt_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("lightning")
    jobs = kill_and_resume(tmp_path, monkeypatch, LIGHTNING)
    # Saved by the default-dirpath ModelCheckpoint into the job's checkpoint dir, after epoch 0.
    assert jobs["from"].path == str(jobs["store"].job_dir(jobs["killed"]) / "checkpoints/epoch=0-step=5.ckpt")
    # Lightning restores a checkpoint its ModelCheckpoint wrote at an epoch's end as one from the
    # middle of that epoch: it starts the (non-stateful) dataloader of epoch 0 again and runs one
    # more batch there (the resumed job's next checkpoint is epoch=0-step=6), so from step 6 on
    # the curve is not the uninterrupted one's: only the restored weights are compared.
    check_curve_and_weights(jobs, resumed_step=5, first_new_step=5, last_step=14, exact=False)


@pytest.mark.timeout(1800)
def test_deepspeed_zero2_loads_the_resume_tag_from_load_checkpoint_of_the_checkpoint_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("deepspeed")
    jobs = kill_and_resume(tmp_path, monkeypatch, DEEPSPEED, launcher="deepspeed")
    assert jobs["from"].kind == "deepspeed" and jobs["from"].path.endswith("/checkpoints/global_step6")
    check_curve_and_weights(jobs, resumed_step=6, first_new_step=6, last_step=9)
