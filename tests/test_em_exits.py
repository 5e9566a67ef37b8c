"""A process that ends without ``run.finish()`` still leaves every logged point readable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.em_helpers import metric_lines, run_record, tensorboard

HERE = str(Path(__file__).resolve().parents[1])

LOG_100 = """
import os, signal, sys
from jupyter_disttrain import em
{before}
run = em.create_run("r", hparams={{"lr": 0.1}})
for step in range(100):
    run.log("train", {{"loss": step / 100}}, step=step)
{after}
"""


def run_script(tmp_path: Path, before: str = "", after: str = "") -> subprocess.CompletedProcess[str]:
    outside = ("RANK", "WORLD_SIZE")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTTRAIN_") and k not in outside}
    env["PYTHONPATH"] = HERE
    source = LOG_100.format(before=textwrap.dedent(before), after=textwrap.dedent(after))
    return subprocess.run(
        [sys.executable, "-c", source], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def assert_every_point(tmp_path: Path) -> dict[str, object]:
    lines = metric_lines(tmp_path / ".disttrain/runs/r/metrics.jsonl")
    assert [p["step"] for p in lines] == list(range(100))
    scalars, hparams, _ = tensorboard(tmp_path / ".disttrain/tensorboard/r")
    assert [s for s, _ in scalars["train/loss"]] == list(range(100)) and hparams == {"lr": 0.1}
    return run_record(tmp_path / ".disttrain/runs/r")


def test_sigterm_writes_the_points_then_terminates_as_before(tmp_path: Path) -> None:
    done = run_script(tmp_path, after="os.kill(os.getpid(), signal.SIGTERM)\nimport time; time.sleep(30)")
    assert done.returncode == -signal.SIGTERM, done.stderr
    record = assert_every_point(tmp_path)
    assert (record["status"], record["reason"]) == ("failed", "terminated (SIGTERM)")


def test_sigterm_calls_the_users_own_handler_too(tmp_path: Path) -> None:
    before = """
    def on_term(signum, frame):
        print("user handler ran", flush=True)
        sys.exit(7)
    signal.signal(signal.SIGTERM, on_term)
    """
    done = run_script(tmp_path, before=before, after="os.kill(os.getpid(), signal.SIGTERM)")
    assert done.returncode == 7 and "user handler ran" in done.stdout, done.stderr
    assert_every_point(tmp_path)


@pytest.mark.parametrize(
    ("after", "status", "reason"),
    [
        ("raise RuntimeError('boom')", "failed", "RuntimeError: boom"),
        ("", "finished", None),  # a script that ends without finish(): finished at exit
    ],
)
def test_exit_without_finish_writes_the_points(tmp_path: Path, after: str, status: str, reason: str) -> None:
    done = run_script(tmp_path, after=after)
    assert done.returncode == (1 if reason else 0), done.stderr
    record = assert_every_point(tmp_path)
    assert (record["status"], record["reason"]) == (status, reason)
    assert record["final_metrics"] == {"train/loss": 0.99}


def test_a_forked_child_that_gets_sigterm_leaves_the_parents_run_alone(tmp_path: Path) -> None:
    after = """
    pid = os.fork()
    if pid == 0:  # a DataLoader worker, say: killed while the parent's points still wait
        run.log("train", {"loss": 9.0}, step=1000)
        os.kill(os.getpid(), signal.SIGTERM)
    _, code = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(code) and os.WTERMSIG(code) == signal.SIGTERM
    run.finish()
    """
    done = run_script(tmp_path, after=after)
    assert done.returncode == 0, done.stderr
    assert assert_every_point(tmp_path)["status"] == "finished"  # the child's point is not there


# A SIGTERM that arrives while the main thread writes the waiting points (the write is slowed
# down here to place it there every time): torchrun's SIGTERM reaching a rank that is ending its
# runs after a peer's failure. The handler waits for the write, then ends the process as before.
MID_WRITE = """
from jupyter_disttrain.em import sink
real_append = sink.append_text
def append_text(path, data):
    os.kill(os.getpid(), signal.SIGTERM)
    real_append(path, data)
sink.append_text = append_text
"""


@pytest.mark.parametrize(
    ("end", "status", "reason"),
    [
        ("run.finish()", "finished", None),
        ("raise RuntimeError('peer left')", "failed", "RuntimeError: peer left"),
    ],
)
def test_sigterm_in_the_middle_of_the_last_write_waits_for_it(
    tmp_path: Path, end: str, status: str, reason: str | None
) -> None:
    done = run_script(tmp_path, after=MID_WRITE + end)
    assert done.returncode == -signal.SIGTERM, done.stderr
    record = assert_every_point(tmp_path)
    assert (record["status"], record["reason"]) == (status, reason)
