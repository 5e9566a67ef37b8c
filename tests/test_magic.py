"""``%%distrun`` in an in-process IPython shell: bad input, dry runs, the line magic."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain import api
from jupyter_disttrain.notebook.magics import JobCancelledError, JobFailedError
from jupyter_disttrain.storage.store import JobStore


@pytest.fixture
def shell(tmp_path: Path, monkeypatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(tmp_path / "jobs"))
    monkeypatch.setenv("DISTTRAIN_VIEW", "text")
    monkeypatch.chdir(tmp_path)
    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext jupyter_disttrain", store_history=True)
    yield ip
    InteractiveShell.clear_instance()


def _jobs(tmp_path: Path) -> list[str]:
    return JobStore(tmp_path / "jobs").ids(include_deleted=True)


BAD_INPUT = [
    ("--gpus 0", "x = 1", "--gpus takes a whole number of at least 1"),
    ("--gpus -1", "x = 1", "--gpus"),
    ("--gpus abc", "x = 1", "--gpus takes a whole number"),
    ("--nodes 0", "x = 1", "--nodes takes a whole number of at least 1"),
    ("--frobnicate", "x = 1", "script arguments go after --"),
    ("--gpus 2 --epochs 3", "x = 1", "script arguments go after --"),
    ("", "   \n", "the cell is empty"),
    ("", "x = (\n", "line 2 of the cell"),  # JupyterLab numbers the magic line 1
    ("--backend nomad", "x = 1", "unknown backend 'nomad'; choose one of"),
    ("--name My_Job", "x = 1", "DNS-1123"),
    ("--env FOO", "x = 1", "--env takes KEY=VALUE"),
    ("--max-restarts -1", "x = 1", "--max-restarts"),
]


@pytest.mark.parametrize(("line", "cell", "expected"), BAD_INPUT)
def test_bad_input_is_one_line_and_launches_nothing(
    shell: InteractiveShell, tmp_path: Path, line: str, cell: str, expected: str
) -> None:
    with pytest.raises(UsageError) as err:
        shell.run_cell_magic("distrun", line, cell)
    message = str(err.value)
    assert expected in message
    assert "\n" not in message.strip()
    assert _jobs(tmp_path) == []


def test_dry_run_prints_script_and_request_and_runs_nothing(
    shell: InteractiveShell, tmp_path: Path, capsys
) -> None:
    shell.run_cell("import os as operating_system\nfactor = 3", store_history=True)
    shell.run_cell_magic(
        "distrun",
        "--gpus 2 --env NCCL_DEBUG=INFO --dry-run -- --epochs 3",
        "print(operating_system.getpid() * factor)",
    )
    out = capsys.readouterr().out
    assert "import os as operating_system" in out and "factor = 3" in out
    assert "--nproc-per-node=2" in out and "NCCL_DEBUG=INFO" in out and "--epochs 3" in out
    assert _jobs(tmp_path) == []


def test_pitfall_warnings_name_the_line_and_can_be_silenced(shell: InteractiveShell, capsys) -> None:
    cell = "import torch\nmodel = torch.nn.Linear(2, 2)\nmodel = torch.nn.DataParallel(model)\n"
    shell.run_cell_magic("distrun", "--dry-run", cell)
    # JupyterLab's numbering: the %%distrun line is line 1, so DataParallel is on line 4.
    assert "warning: line 4:" in capsys.readouterr().out
    shell.run_cell_magic("distrun", "--dry-run --no-check data-parallel", cell)
    assert "warning: line" not in capsys.readouterr().out


def test_warnings_in_earlier_cells_name_jupyterlabs_line(shell: InteractiveShell, capsys) -> None:
    # IPython drops a cell's leading blank lines from In[]; JupyterLab still counts them.
    shell.run_cell("\n\nimport torch\ndef save(m):\n    torch.save(m, 'a.pt')\n", store_history=True)
    assert shell.run_cell("%%distrun --dry-run\nsave(1)\n", store_history=True).success
    assert "warning: In [2] line 5: every rank runs `torch.save(...)`" in capsys.readouterr().out


def test_line_magic_lists_and_reports_unknown_jobs(shell: InteractiveShell, tmp_path: Path, capsys) -> None:
    shell.run_line_magic("distrun", "list")
    assert f"no jobs in {(tmp_path / 'jobs').resolve()};" in capsys.readouterr().out
    # in a notebook, the hint is the magic, not the terminal command
    with pytest.raises(UsageError, match=r"no job 'nope-00000' in .*; `%distrun list` shows"):
        shell.run_line_magic("distrun", "status nope-00000")


def test_flag_values_follow_shell_quoting(shell: InteractiveShell, tmp_path: Path, capsys) -> None:
    shell.run_cell_magic(
        "distrun",
        """--name 'mnist' --env "MSG=hello world" --env 'Q="x"' --dry-run -- --title 'a b' "--n=1" """,
        "print(1)",
    )
    out = capsys.readouterr().out
    assert "(job mnist-" in out  # the name without its quotes
    assert "MSG='hello world'" in out and """Q='"x"'""" in out
    assert "--title 'a b' --n=1" in out  # script args after -- keep their shell meaning
    assert _jobs(tmp_path) == []
    with pytest.raises(UsageError, match="check the quotes"):
        shell.run_cell_magic("distrun", "--name 'mnist", "print(1)")


def test_detach_returns_at_once_and_a_followed_job_that_is_cancelled_fails_the_cell(
    shell: InteractiveShell, tmp_path: Path, capsys
) -> None:
    store = JobStore(tmp_path / "jobs")
    sleeper = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
    shell.run_cell_magic("distrun", "--gpus 1 --detach --name detached", sleeper)  # no wait, no error
    (detached,) = _jobs(tmp_path)
    assert "submitted" in capsys.readouterr().out
    assert not api.get_job(detached, store).status().is_terminal
    api.get_job(detached, store).cancel()

    def cancel_the_followed_job() -> None:  # as the widget's Cancel or another client would
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            others = [j for j in _jobs(tmp_path) if j != detached]
            if others and api.get_job(others[0], store).status().replicas_ready:
                api.get_job(others[0], store).cancel()
                return
            time.sleep(0.1)

    canceller = threading.Thread(target=cancel_the_followed_job)
    canceller.start()
    # a cancel someone asked for still stops Run All, as one plain line rather than a red error
    with pytest.raises(JobCancelledError, match=r"^%%distrun: job followed-\w+ cancelled$") as err:
        shell.run_cell_magic("distrun", "--gpus 1 --name followed", sleeper)
    canceller.join()
    assert isinstance(err.value, JobFailedError) and err.value._render_traceback_() == [str(err.value)]


def test_line_magic_dumps_the_stacks_of_a_stuck_rank(shell: InteractiveShell, tmp_path: Path, capsys) -> None:
    script = "import time\ndef stuck_here():\n    time.sleep(600)\nprint('stuck', flush=True)\nstuck_here()\n"
    job = api.submit(script, store=JobStore(tmp_path / "jobs"), gpus=2, accelerator="cpu", name="stuck")
    try:
        log = job.dir / "logs" / "rank-1.log"
        deadline = time.monotonic() + 180
        while not (log.is_file() and "stuck" in log.read_text()):
            assert time.monotonic() < deadline and not job.status().is_terminal
            time.sleep(0.2)
        shell.run_line_magic("distrun", f"stack {job.id} --replica rank-1")
        out = capsys.readouterr().out
        assert out.startswith("==== rank-1 (") and "stuck_here" in out
        # the product's frames (the rank wrapper, runpy) are folded into one line
        assert "worker.py" not in out and "frozen runpy" not in out and "frame(s) of jupyter_disttrain" in out
        with pytest.raises(UsageError, match="has no replica 'rank-9'"):
            shell.run_line_magic("distrun", f"stack {job.id} --replica rank-9")
    finally:
        job.cancel()
