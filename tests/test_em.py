"""``jupyter_disttrain.em`` in this process: storage, ranks, bad input, artifacts."""

from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_disttrain import em
from jupyter_disttrain.em import run as run_module
from jupyter_disttrain.em import sink
from tests.em_helpers import metric_lines, run_record, tensorboard

HERE = str(Path(__file__).resolve().parents[1])


@pytest.fixture(autouse=True)
def outside_a_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in (
        "DISTTRAIN_JOB_DIR",
        "DISTTRAIN_JOB_ID",
        "DISTTRAIN_TENSORBOARD_DIR",
        "DISTTRAIN_HPARAMS",
        "RANK",
        "WORLD_SIZE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / ".disttrain"


@pytest.fixture
def no_tensorboard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests of the files alone skip the TensorBoard follower (a process that imports torch)."""
    monkeypatch.setattr(run_module, "start_follower", lambda *args: None)


def test_a_run_outside_a_job_writes_record_metrics_and_tensorboard(outside_a_job: Path) -> None:
    run = em.create_run("mnist", hparams={"lr": 0.1, "opt": "sgd", "layers": [2, 3]}, description="first")
    for step in range(5):
        run.log("train", {"loss": 1 / (step + 1), "acc": step / 10}, step=step, epoch=step // 2)
    run.log("val", {"loss": 0.5}, step=4, epoch=2)
    run.finish()

    run_dir = outside_a_job / "runs" / "mnist"
    record = run_record(run_dir)
    assert record["name"] == "mnist" and record["description"] == "first"
    assert record["hparams"] == {"lr": 0.1, "opt": "sgd", "layers": [2, 3]}
    assert record["status"] == "finished" and record["start_time"] <= record["end_time"]
    assert record["platform"]["world_size"] == 1 and record["platform"]["recording_ranks"] == 1
    assert record["platform"]["torch"] and record["platform"]["gpus"] == 0
    assert record["final_metrics"] == {"train/acc": 0.4, "train/loss": 0.2, "val/loss": 0.5}
    lines = metric_lines(run_dir / "metrics.jsonl")
    assert len(lines) == 11
    assert lines[0] == {**lines[0], "type": "train", "name": "loss", "value": 1.0, "step": 0, "epoch": 0}
    assert set(lines[0]) == {"type", "name", "value", "step", "epoch", "time"}

    scalars, hparams, metric_tags = tensorboard(outside_a_job / "tensorboard" / "mnist")
    assert scalars["train/loss"] == [(s, pytest.approx(1 / (s + 1))) for s in range(5)]
    assert scalars["val/loss"] == [(4, 0.5)]
    assert hparams == {"lr": 0.1, "opt": "sgd", "layers": "[2, 3]"}
    assert sorted(metric_tags) == ["train/acc", "train/loss", "val/loss"]
    assert os.listdir(outside_a_job / "tensorboard" / "mnist") == [
        n for n in os.listdir(outside_a_job / "tensorboard" / "mnist") if n.startswith("events.out")
    ], "no stray hparams sub-directory"


@pytest.mark.usefixtures("no_tensorboard")
def test_log_returns_at_once_and_a_background_thread_writes(outside_a_job: Path) -> None:
    run = em.create_run("buffered")
    run.log("train", {"loss": 1.0}, step=0)
    path = outside_a_job / "runs" / "buffered" / "metrics.jsonl"
    assert not path.exists()  # buffered: nothing written in the caller's thread
    deadline = time.monotonic() + sink.INTERVAL * 5
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p["value"] for p in metric_lines(path)] == [1.0]
    run.finish()
    run.finish()  # again: nothing
    run.log("train", {"loss": 2.0})  # after finish: nothing
    assert len(metric_lines(path)) == 1


@pytest.mark.usefixtures("no_tensorboard")
def test_the_total_steps_are_recorded_for_progress(outside_a_job: Path) -> None:
    with em.create_run("progress", total_steps=1000):
        pass
    assert run_record(outside_a_job / "runs" / "progress")["total_steps"] == 1000


def test_nan_and_infinity_are_kept_and_a_step_going_back_is_flagged(outside_a_job: Path) -> None:
    with em.create_run("odd") as run:
        run.log("train", {"loss": float("nan"), "grad": float("inf")}, step=10)
        run.log("train", {"loss": 0.5}, step=3)
        run.log("val", {"loss": 0.7}, step=3)  # steps are per type: val did not go back
    lines = metric_lines(outside_a_job / "runs" / "odd" / "metrics.jsonl")
    assert [(p["value"], p.get("step_backwards", False)) for p in lines] == [
        ("NaN", False),
        ("Infinity", False),
        (0.5, True),
        (0.7, False),
    ]
    scalars, _, _ = tensorboard(outside_a_job / "tensorboard" / "odd")
    assert math.isnan(scalars["train/loss"][0][1]) and scalars["train/grad"] == [(10, math.inf)]


@pytest.mark.usefixtures("no_tensorboard")
def test_memory_is_bounded_when_logging_outruns_the_writer(
    outside_a_job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sink, "MAX_PENDING", 50)
    monkeypatch.setattr(sink, "WAKE_AT", 10**9)  # the background writer sleeps: put() must write
    with em.create_run("burst") as run:
        waiting = []
        for step in range(1000):
            run.log("train", {"loss": 0.1}, step=step)
            waiting.append(len(run._sink._pending))
    assert max(waiting) < 50
    steps = [p["step"] for p in metric_lines(outside_a_job / "runs" / "burst" / "metrics.jsonl")]
    assert steps == list(range(1000))


@pytest.mark.usefixtures("no_tensorboard")
def test_numpy_and_tensor_scalars_are_numbers(outside_a_job: Path) -> None:
    import numpy as np
    import torch

    with em.create_run("kinds") as run:
        values = {"a": np.float32(0.5), "b": torch.tensor(2.0), "c": 3, "d": np.int64(4)}
        run.log("test", values, step=np.int64(1))
    values = [p["value"] for p in metric_lines(outside_a_job / "runs" / "kinds" / "metrics.jsonl")]
    assert values == [0.5, 2.0, 3.0, 4.0]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda r: r.log("train", {"loss": "low"}), TypeError, "metric 'loss': value 'low' is a str"),
        (lambda r: r.log("train", {"loss": None}), TypeError, "metric 'loss'"),
        (lambda r: r.log("train", {"ok": True}), TypeError, "metric 'ok'"),
        (lambda r: r.log("train", {"loss": 1 + 2j}), TypeError, "value .* is a complex, not a number"),
        (lambda r: r.log("train", {"loss": __import__("numpy").ones(2)}), ValueError, "of one element"),
        (lambda r: r.log("train", {1: 0.5}), ValueError, "metric name 1: use letters"),
        (lambda r: r.log("train", {"": 0.5}), ValueError, "metric name '': use letters"),
        (lambda r: em.create_run("x", total_steps=2.5), TypeError, "total_steps 2.5: an integer"),
        (lambda r: r.log("valid", {"loss": 1}), ValueError, "type 'valid': use one of train, val, test"),
        (lambda r: r.log("train", {"val/loss": 1}), ValueError, "no '/' or spaces.*e.g. 'val_loss'"),
        (lambda r: r.log("train", {"my loss": 1}), ValueError, "e.g. 'my_loss'"),
        (lambda r: r.log("train", [("loss", 1)]), TypeError, "a dict of name to number"),
        (lambda r: r.log("train", {"loss": 1}, step=1.5), TypeError, "step 1.5: an integer"),
        (lambda r: em.create_run("a b"), ValueError, "run name 'a b': use letters"),
        (lambda r: em.create_run("x", ranks="1"), ValueError, "ranks='1'"),
        (lambda r: em.create_artifact("../up"), ValueError, "artifact name '../up'"),
        (lambda r: em.create_artifact("ck").add_file("missing.pt"), FileNotFoundError, "no such file"),
        (lambda r: em.create_artifact("ck").add_file("."), FileNotFoundError, "a directory .use add_dir."),
        (lambda r: em.create_artifact("ck").add_dir("missing"), NotADirectoryError, "not a directory"),
        (lambda r: em.create_artifact("ck").add_file(__file__, "../x.py"), ValueError, "relative path"),
        (lambda r: em.create_artifact("ck").add_file(__file__, "/etc/x"), ValueError, "relative path"),
        (lambda r: r.mark_output("ck"), TypeError, "mark_output: an artifact"),
    ],
)
@pytest.mark.usefixtures("no_tensorboard")
def test_bad_input_is_one_line_that_says_what_to_write(call, error, message) -> None:  # type: ignore[no-untyped-def]
    with em.create_run("bad") as run:
        with pytest.raises(error, match=message) as info:
            call(run)
        assert "\n" not in str(info.value)
        run.log("train", {"loss": 1.0})  # the run goes on
    assert not [p for p in metric_lines(Path(".disttrain/runs/bad/metrics.jsonl")) if p["name"] != "loss"]


@pytest.mark.usefixtures("no_tensorboard")
def test_other_ranks_record_nothing_by_default(outside_a_job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    run = em.create_run("quiet")
    run.log("train", {"loss": 1.0}, step=0)
    art = em.create_artifact("ck")
    art.add_file("saved-on-rank-0-only.pt")  # no error: this rank does not record
    run.mark_output(art)
    run.finish()
    assert not run.active and not outside_a_job.exists()


def test_ranks_all_records_each_ranks_metrics_under_rank_n(
    outside_a_job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in ("1", "0"):
        monkeypatch.setenv("RANK", rank)
        with em.create_run("every", hparams={"lr": 1}, ranks="all") as run:
            run.log("train", {"loss": float(rank)}, step=0)
    run_dir = outside_a_job / "runs" / "every"
    assert run_record(run_dir)["platform"]["recording_ranks"] == 2
    assert sorted(p.name for p in run_dir.iterdir()) == ["rank-0", "rank-1", "run.json"]
    for rank in (0, 1):
        assert [p["value"] for p in metric_lines(run_dir / f"rank-{rank}" / "metrics.jsonl")] == [rank]
        scalars, hparams, _ = tensorboard(outside_a_job / "tensorboard" / "every" / f"rank-{rank}")
        assert scalars == {"train/loss": [(0, rank)]} and hparams == {"lr": 1}


@pytest.mark.usefixtures("no_tensorboard")
def test_artifacts_are_copied_byte_identical_with_a_manifest(outside_a_job: Path, tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(os.urandom(3000))
    (src / "sub" / "b.txt").write_text("b")
    (tmp_path / "outside.txt").write_text("linked")
    (src / "link.txt").symlink_to(tmp_path / "outside.txt")
    with em.create_run("arts") as run:
        art = em.create_artifact("model")
        art.add_file(src / "a.bin", name="weights/final.bin")
        art.add_dir(src)
        run.mark_output(art)
        data = em.create_artifact("data")
        run.mark_input(data)
    out = outside_a_job / "runs" / "arts" / "artifacts" / "model"
    manifest = __import__("json").loads((out / "manifest.json").read_text())
    paths = ["ckpt/a.bin", "ckpt/link.txt", "ckpt/sub/b.txt", "weights/final.bin"]
    assert [f["path"] for f in manifest["files"]] == paths
    for entry in manifest["files"]:
        copied = out / entry["path"]
        assert not copied.is_symlink() and copied.stat().st_nlink == 1  # copied, not hard-linked
        assert entry["size"] == copied.stat().st_size
        assert entry["sha256"] == hashlib.sha256(copied.read_bytes()).hexdigest()
    assert (out / "weights/final.bin").read_bytes() == (src / "a.bin").read_bytes()
    assert (out / "ckpt/link.txt").read_text() == "linked"
    assert manifest["output"] and not manifest["input"] and manifest["run"] == "arts"
    assert run_record(outside_a_job / "runs" / "arts")[("outputs")] == ["model"]
    assert run_record(outside_a_job / "runs" / "arts")["inputs"] == ["data"]


@pytest.mark.usefixtures("no_tensorboard")
def test_login_and_upload_do_nothing_and_say_so_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_module, "_said", set())
    em.login("key")
    em.login()
    with em.create_run("noop") as run:
        run.upload(".")
        run.upload(".")
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "login() does nothing" in m]) == 1
    assert len([m for m in said if "upload() does nothing" in m]) == 1


def test_importing_em_imports_neither_torch_nor_tensorboard() -> None:
    code = (
        "import sys; from jupyter_disttrain import em; "
        "print([m for m in ('torch', 'tensorboard') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=HERE)
    assert out.stdout.strip() == "[]"
