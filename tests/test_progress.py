"""Progress read off a job's output: tqdm's redraws, Lightning's epochs."""

from __future__ import annotations

import re

from jupyter_disttrain.payloads import RunSummary
from jupyter_disttrain.progress import Progress, from_bar, last_bar
from jupyter_disttrain.progressview import ProgressFeed, eta_text, progress_html, sparkline_svg
from jupyter_disttrain.specs import JobPhase, JobStatus


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
