"""A Hugging Face ``Trainer`` run as a job saves where the job lists checkpoints: with no
``output_dir`` of the script's, its ``checkpoint-N`` dirs land in the job's checkpoint dir
(``runtime/libresume.py``), as a Lightning ``ModelCheckpoint`` without a ``dirpath`` does. A tiny
BERT made from a config (no download) trains one step on one CPU rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

TRAIN = """
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

config = BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=16, max_position_embeddings=16, num_labels=2)
torch.manual_seed(0)
data = [{"input_ids": torch.randint(0, 16, (6,)), "labels": torch.tensor(i % 2)} for i in range(4)]
args = TrainingArguments(max_steps=1, save_steps=1, per_device_train_batch_size=4, report_to="none",
                         use_cpu=True, disable_tqdm=True)  # no output_dir: the job's checkpoint dir
Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=data).train()
print("own", TrainingArguments(output_dir="mine", use_cpu=True, report_to="none").output_dir)
"""


def test_a_trainer_without_an_output_dir_saves_into_the_jobs_checkpoint_dir(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    store = JobStore(tmp_path / "jobs")
    job = api.submit(TRAIN, store=store, gpus=1, accelerator="cpu", name="hf", working_dir=str(tmp_path))
    status = job.wait(timeout=600)
    assert status.phase is JobPhase.SUCCEEDED, [line.text for line in job.logs()][-20:]
    listed = job.checkpoints().checkpoints
    saved = job.dir / "checkpoints"
    # One checkpoint: the whole directory (issue 34 item 2), resumed and pruned as one.
    assert [(c.path, c.kind, c.step, c.complete) for c in listed] == [
        (str(saved / "checkpoint-1"), "files", 1, True)
    ], listed
    assert "own mine" in [line.text for line in job.logs()]  # an output_dir of the script's stays
    assert not (tmp_path / "trainer_output").exists()  # transformers' own default, in the working dir
