"""Progress read off a job's output: tqdm's redraws, Lightning's epochs."""

from __future__ import annotations

import importlib.util
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.commands import run_subcommand
from jupyter_disttrain.model.progress import Progress, eta_text, from_bar, last_bar
from jupyter_disttrain.model.specs import JobPhase, JobStatus
from jupyter_disttrain.notebook.progress import ProgressFeed, progress_html, sparkline_svg
from jupyter_disttrain.payloads.runs import RunSummary
from jupyter_disttrain.storage.store import JobStore


def test_a_tqdm_redraw_gives_step_total_and_seconds_left() -> None:
    line = "train:  45%|████▌     | 45/100 [00:02<00:03, 17.9it/s, loss=0.5]\r"
    assert from_bar(line) == Progress(45, 100, 3.0, "tqdm", "train")
    assert from_bar(" 12%|█▏        | 12/100 [01:00<1:05:00, 15.63it/s]") == Progress(12, 100, 3900.0, "tqdm")
    assert from_bar("100%|██████████| 1.2k/1.2k [01:02<00:00, 19it/s]") == Progress(1200, 1200, 0.0, "tqdm")
    assert from_bar("45it [00:02, 17.9it/s]") == Progress(45, None, None, "tqdm")
    assert from_bar("  0%|          | 0/100 [00:00<?, ?it/s]") == Progress(0, 100, None, "tqdm")
    assert from_bar("epoch 3 [ok, 2 files]") is None and from_bar("loss 0.5") is None


def test_a_lightning_bar_with_max_epochs_counts_every_epoch() -> None:
    line = "Epoch 2:  45%|████▌     | 45/100 [00:02<00:03, 17.9it/s, v_num=0]"
    assert from_bar(line, {"max_epochs": 5}) == Progress(245, 500, 13.0, "tqdm", "epoch 3 of 5")
    assert from_bar(line) == Progress(45, 100, 3.0, "tqdm", "Epoch 2")


def test_the_last_redraw_wins() -> None:
    lines = ["start", " 10%|#  | 1/10 [00:01<00:09]\r", "log line", " 20%|## | 2/10 [00:02<00:08, 1it/s]\r"]
    assert last_bar(lines) == Progress(2, 10, 8.0, "tqdm")
    assert last_bar(["nothing"]) is None


def test_the_widgets_bar_says_step_total_and_eta_and_draws_the_first_metric() -> None:
    assert eta_text(3900) == "ETA 1:05:00" and eta_text(3) == "ETA 0:03" and eta_text(None) == ""
    shown = progress_html(Progress(45, 100, 3.0, "tqdm", "train"))
    assert "45/100 (45%) · ETA 0:03 · train" in shown and "width:45.0%" in shown
    assert "step 7" in progress_html(Progress(7, None, None, "tqdm")) and progress_html(None) == ""
    line = sparkline_svg("train/loss", [1.0, 0.5, float("nan"), 0.25])
    points = re.search(r'points="([^"]*)"', line)
    assert points is not None and len(points[1].split()) == 3 and "train/loss 0.25" in line  # finite
    assert sparkline_svg("loss", [1.0]) == ""


def _run(step: int, loss: float) -> RunSummary:
    return RunSummary(
        "j",
        "j",
        JobPhase.RUNNING,
        "r",
        "running",
        None,
        None,
        {},
        {"train/loss": loss, "a/text": "x"},
        step,
        100,
        5.0,
        0,
        None,
    )


def test_the_feed_reads_once_a_second_and_adds_a_point_per_new_step() -> None:
    now = [0.0]
    runs = [[_run(1, 1.0)]]
    feed = ProgressFeed(lambda _s: Progress(1, 100, 5.0, "em"), lambda _s: runs[0], clock=lambda: now[0])
    status = JobStatus(job_id="j", phase=JobPhase.RUNNING)
    first = feed.poll(status)
    assert first is not None and first[0] == Progress(1, 100, 5.0, "em")
    assert feed.poll(status) is None  # not due yet
    now[0] += 1.0
    feed.poll(status)  # the same step again: no new point
    runs[0] = [_run(2, 0.5)]
    now[0] += 1.0
    shown = feed.poll(status)
    assert feed.values == [1.0, 0.5] and shown is not None and "train/loss 0.5" in shown[1]
    assert "jp-DistTrain-progress" not in feed.html(None) and "polyline" in feed.html(None)


RICH_LOG = Path(__file__).parent / "data" / "lightning_rich_rank0.log"


def test_lightnings_rich_bar_counts_its_own_epochs() -> None:
    line = "\r\x1b[2KEpoch 3/19 \x1b[35m━━━━━\x1b[0m 2/2 \x1b[2m0:00:01 • 0:00:01\x1b[0m 5.3it/s v_num: 0"
    assert from_bar(line) == Progress(8, 40, 1.0 + 16 * 2.0, "rich", "epoch 4 of 20")
    assert from_bar("Epoch 0/1  ━━━━━━━━━━━━━━━━━━━━ 0/3 0:00:00 • -:--:-- 0.00it/s") == Progress(
        0, 6, None, "rich", "epoch 1 of 2"
    )
    # Without max_epochs (-1: "Epoch 3/-2"; None: "Epoch 3") its hparam counts them, as tqdm's.
    endless = "Epoch 3/-2 ━━━ 2/4 0:00:02 • 0:00:02 1.00it/s"
    assert from_bar(endless) == Progress(2, 4, 2.0, "rich", "Epoch 3/-2")
    assert from_bar("Epoch 3 ━━━ 2/4 0:00:02 • 0:00:02", {"max_epochs": 5}) == Progress(
        14, 20, 2.0 + 4.0, "rich", "epoch 4 of 5"
    )
    assert from_bar("Validation ━━━━━━╺━━━ 1/3 1 day, 0:00:00 • -:--:--") == Progress(
        1, 3, None, "rich", "Validation"
    )
    assert from_bar("Epoch 3/19 ━━━ 2/-- 0:00:00 • -:--:--") == Progress(2, None, None, "rich", "Epoch 3/19")


def test_a_recorded_lightning_run_with_rich_reads_its_epochs_as_it_goes() -> None:
    """Lightning 2.6.6 with Rich 13.9.4 installed and FORCE_COLOR=1 (ipykernel sets it, so a job
    submitted from a notebook has it): Rich redraws the epoch bar and the validation bar with
    cursor moves, each redraw begun by "\\r". Cut at every redraw, as the log reader hands out a
    running job's output, the reading is the epoch bar's (never the validation bar's)."""
    data = RICH_LOG.read_bytes().decode()
    readings = []
    for cut in (m.end() for m in re.finditer("\r", data)):
        found = last_bar(data[:cut].split("\n")[-20:], {"max_epochs": 99})  # the bar's own count wins
        if found is not None:
            assert found.source == "rich" and found.total == 9, found
            readings.append((found.label, found.step))
    assert [label for label, _ in readings] == sorted(label for label, _ in readings)  # epochs go up
    assert {label for label, _ in readings} == {"epoch 1 of 3", "epoch 2 of 3", "epoch 3 of 3"}
    assert [step for _, step in readings] == sorted(step for _, step in readings)
    assert last_bar(data.split("\n")) == Progress(9, 9, 0.0, "rich", "epoch 3 of 3")


@pytest.mark.timeout(60)  # the old pattern backtracked: minutes on such a line
def test_a_megabyte_line_without_a_bar_is_read_in_linear_time() -> None:
    lines = {
        "undecodable": "\ufffd" * 1_000_000,
        "words and colons": "loss: 0.5 step: " * 62_500,
        "brackets": " [1," * 250_000,
        "times without a count": " 0:00:01 \u2022 0:00:02" * 50_000,
        "bars": "|" * 1_000_000,
    }
    for what, line in lines.items():
        best = min(_seconds_of(from_bar, line) for _ in range(3))
        assert best < 0.05, f"{what}: {best:.3f} s"
        assert from_bar(line + "\r 10%|#  | 1/10 [00:01<00:09, 1it/s]") == Progress(1, 10, 9.0, "tqdm")


def _seconds_of(fn: Callable[[str], object], arg: str) -> float:
    start = time.perf_counter()
    fn(arg)
    return time.perf_counter() - start


LIGHTNING = """
import os, time, torch, lightning as L
from torch.utils.data import DataLoader, TensorDataset

go = os.path.join(os.environ["DISTTRAIN_JOB_DIR"], "go")


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, index):
        while index == 1 and not os.path.exists(go):  # held at its second step until the test has read it
            time.sleep(0.05)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


data = DataLoader(TensorDataset(torch.randn(12, 4), torch.randn(12, 1)), batch_size=4)
trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_model_summary=False)
trainer.fit(Net(), data)
"""


def test_list_and_status_show_a_running_lightning_jobs_progress(store: JobStore) -> None:
    """A real Lightning run, submitted as from a notebook (ipykernel sets FORCE_COLOR): with rich
    installed (the test extras' transformers brings it) Lightning draws Rich's bar, else tqdm's;
    either is read, its epochs counted (2 epochs of 3 steps)."""
    bar = "rich" if importlib.util.find_spec("rich") else "tqdm"
    env = {"FORCE_COLOR": "1"}
    job = api.submit(
        LIGHTNING, store=store, name="bar", gpus=1, accelerator="cpu", env=env, hparams={"max_epochs": 2}
    )
    try:
        listing = _until(lambda: _say("list", root=store.root), "epoch 1 of 2")
        header, row = listing.splitlines()[:2]
        assert header.split()[-1] == "PROGRESS" and row.startswith(job.id) and "Running" in row
        assert re.search(r" [01]/6 \(\d+%\) · (ETA [\d:]+ · )?epoch 1 of 2$", row), row
        status = _say("status", job.id, root=store.root)
        assert re.search(rf"^  progress: [01]/6 .*epoch 1 of 2 \(from {bar}\)$", status, re.M), status
    finally:
        (job.dir / "go").touch()
    assert job.wait(timeout=300).phase.value == "Succeeded"
    assert "epoch" not in _say("list", root=store.root)  # only while it runs


def _say(*words: str, root: Path) -> str:
    out: list[str] = []
    run_subcommand(["--root", str(root), *words], out.append)
    return "\n".join(out)


def _until(read: Callable[[], str], wanted: str, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    while wanted not in (text := read()):
        assert time.monotonic() < deadline, text
        time.sleep(0.2)
    return text


def test_the_newest_bar_is_read_under_long_lines_within_the_budget(store: JobStore) -> None:
    """The last 20 lines are 16 KiB each, the bar's last: a read bounded to 16 KiB reaches it."""
    from jupyter_disttrain.jobs.manager import JobManager
    from jupyter_disttrain.jobs.progress import progress_of
    from jupyter_disttrain.model.specs import JobSpec, ReplicaStatus
    from jupyter_disttrain.storage.store import JobRecord

    record = JobRecord(id="long-abcde", spec=JobSpec(name="long"))
    store.create(record, "print(1)\n")
    logs = store.job_dir(record.id) / "logs"
    logs.mkdir(exist_ok=True)
    junk = ("x" * (16 * 1024) + "\n") * 25
    (logs / "rank-0.log").write_text(junk + "\r 40%|####      | 4/10 [00:04<00:06,  1.00it/s]\r")
    running = JobStatus(job_id=record.id, phase=JobPhase.RUNNING, replicas=[ReplicaStatus("rank-0")])
    backend = JobManager(store, "local").backend("local")
    assert progress_of(backend, record, running, []) == Progress(4, 10, 6.0, "tqdm")
