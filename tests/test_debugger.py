"""A rank's pdb prompt over its socket (runtime/debugger.py, runtime/debugrelay.py), driven the
way the job layer drives it: one rank wrapper process, as torchrun starts it, and exchanges on
its socket. Whole jobs: tests/test_kernel_values.py (local, warm and cold), the Slurm and toy
cluster tests, tests/ui/tests/debugger.spec.ts (the widget)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_disttrain.jobs.debug import Prompts
from jupyter_disttrain.model.errors import DistTrainError
from jupyter_disttrain.model.specs import LogLine
from jupyter_disttrain.runtime.debugrelay import NoDebugger, exchange

SCRIPT = """\
x = 41
def twice(v):
    return 2 * v
breakpoint()
y = twice(x)
print("y", y, flush=True)
"""


def _rank(job_dir: Path, script: str, **env: str) -> subprocess.Popen[bytes]:
    """Rank 1 of a job in ``job_dir``, under the rank wrapper."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "train.py").write_text(script)
    (job_dir / "logs").mkdir(exist_ok=True)
    full = {
        **os.environ,
        "RANK": "1",
        "DISTTRAIN_JOB_DIR": str(job_dir),
        "DISTTRAIN_LOG_DIR": str(job_dir / "logs"),
        "PYTHONBREAKPOINT": "",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "jupyter_disttrain.runtime.worker", str(job_dir / "train.py")], env=full
    )


def _log(job_dir: Path) -> str:
    path = job_dir / "logs" / "rank-1.log"
    return path.read_text() if path.exists() else ""


def _socket(job_dir: Path, proc: subprocess.Popen[bytes]) -> str:
    path = job_dir / "debug" / "rank-1.sock"
    deadline = time.monotonic() + 30
    while not path.exists():
        assert proc.poll() is None, _log(job_dir)
        assert time.monotonic() < deadline, _log(job_dir)
        time.sleep(0.02)
    return str(path)


def test_breakpoint_is_answered_over_the_socket_then_the_rank_goes_on(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    proc = _rank(job_dir, SCRIPT)
    try:
        sock = _socket(job_dir, proc)
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600  # only the job's user talks to pdb
        first = exchange(sock, {"peek": True}, 10)
        assert first["open"] and "-> y = twice(x)" in first["output"] and first["output"].endswith("(Pdb) ")
        assert exchange(sock, {"peek": True}, 10)["output"] == first["output"]  # a look changes nothing
        assert exchange(sock, {"line": "p x"}, 10) == {"output": "41\n(Pdb) ", "open": True, "quit": False}
        assert "-> print(" in exchange(sock, {"line": "n"}, 10)["output"]
        assert exchange(sock, {"line": "p y"}, 10)["output"] == "82\n(Pdb) "
        assert exchange(sock, {"line": "c"}, 10) == {"output": "", "open": False, "quit": False}
        assert proc.wait(30) == 0
    finally:
        proc.kill()
    log = _log(job_dir)
    assert "[disttrain] rank-1 waits in the debugger at train.py:5" in log and "y 82" in log
    assert "[disttrain] rank-1 left the debugger" in log
    assert not os.path.exists(sock)
    with pytest.raises(NoDebugger, match="no debugger prompt waits there"):
        exchange(sock, {"peek": True}, 5)


def test_pythonbreakpoint_keeps_its_meaning_and_set_trace_is_routed_too(tmp_path: Path) -> None:
    off = _rank(tmp_path / "off", SCRIPT, PYTHONBREAKPOINT="0")
    assert off.wait(30) == 0 and "y 82" in _log(tmp_path / "off") and "debugger" not in _log(tmp_path / "off")
    other = _rank(
        tmp_path / "other", "print('hook', breakpoint(), flush=True)\n", PYTHONBREAKPOINT="os.getcwd"
    )
    assert other.wait(30) == 0 and f"hook {os.getcwd()}" in _log(tmp_path / "other")
    proc = _rank(tmp_path / "trace", "import pdb\nz = 5\npdb.set_trace()\nprint('z', z)\n")
    try:
        sock = _socket(tmp_path / "trace", proc)
        assert exchange(sock, {"line": "p z"}, 10)["output"].endswith("5\n(Pdb) ")
        exchange(sock, {"line": "c"}, 10)
        assert proc.wait(30) == 0
    finally:
        proc.kill()


def test_a_prompt_no_one_answers_goes_on_after_its_timeout(tmp_path: Path) -> None:
    proc = _rank(tmp_path / "job", SCRIPT, DISTTRAIN_DEBUG_TIMEOUT="1")
    assert proc.wait(60) == 0
    log = _log(tmp_path / "job")
    assert "rank-1: no answer for 1 s; it goes on" in log and "left the debugger" in log and "y 82" in log


def test_post_mortem_on_the_first_failing_rank_shows_its_locals(tmp_path: Path) -> None:
    script = "def train(cfg):\n    lr = cfg['lr']\n    return lr\ntrain({'epochs': 3})\n"
    job_dir = tmp_path / "job"
    proc = _rank(job_dir, script, DISTTRAIN_PDB="1")
    try:
        sock = _socket(job_dir, proc)
        said = exchange(sock, {"peek": True}, 10)["output"]
        assert "post-mortem: KeyError: 'lr'" in said and "-> lr = cfg['lr']" in said
        assert exchange(sock, {"line": "p cfg"}, 10)["output"] == "{'epochs': 3}\n(Pdb) "
        assert exchange(sock, {"line": "c"}, 10)["open"] is False
        assert proc.wait(30) == 1
    finally:
        proc.kill()
    log = _log(job_dir)  # the traceback comes after the prompt: the log still ends with it
    assert log.rstrip().endswith("KeyError: 'lr'") and log.index("left the debugger") < log.index("Traceback")
    # Another rank failing in the same job opens no second prompt: it fails as it would.
    second = _rank(job_dir, script, DISTTRAIN_PDB="1")
    assert second.wait(30) == 1


def test_quit_answers_then_waits_for_the_cancel_and_a_long_job_dir_still_binds(tmp_path: Path) -> None:
    job_dir = tmp_path / ("d" * 60) / ("e" * 60)  # the socket's path is past AF_UNIX's 108 bytes
    proc = _rank(job_dir, SCRIPT)
    try:
        sock = _socket(job_dir, proc)
        assert len(sock) > 108
        said = exchange(sock, {"line": "q"}, 10)  # the first exchange: with where pdb stopped
        assert (said["open"], said["quit"]) == (False, True) and "-> y = twice(x)" in said["output"]
        time.sleep(0.5)
        assert proc.poll() is None  # the job layer cancels the job: the rank does not fail it
        assert "quit in the debugger; the job is being cancelled" in _log(job_dir)
    finally:
        proc.kill()
        proc.wait()


def test_prompts_are_read_from_the_ranks_lines() -> None:
    prompts = Prompts()
    lines = [
        LogLine(
            "[rank1]: [disttrain] rank-1 waits in the debugger at train.py:7 (it goes on after 600 s)",
            "node-0",
            "0",
            1,
        ),
        LogLine("[disttrain] rank-0 waits in the debugger at In:3", "rank-0", "0", 0),
        LogLine("print('[disttrain] rank-2 waits in the debugger at x:1')", "rank-2", "0", 2),
    ]
    opened, closed = prompts.feed(lines)
    assert closed == []
    assert [(p.replica, p.where, p.source) for p in opened] == [
        ("rank-1", "train.py:7", "node-0"),
        ("rank-0", "In:3", "rank-0"),
    ]
    assert prompts.feed([LogLine("[disttrain] rank-1 left the debugger", "node-0", "1", 1)]) == (
        [],
        ["rank-1"],
    )
    assert prompts.ended({"rank-0"}) == ["rank-0"] and prompts.open == {}


def test_a_terminal_answers_a_jobs_prompt_and_a_front_end_without_stdin_says_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real local job: ``jupyter disttrain debug`` answers its prompt from the terminal; a front
    end whose ``input()`` cannot ask (nbclient's kernel) names that command instead of hanging."""
    from jupyter_disttrain import api
    from jupyter_disttrain.commands import run_subcommand
    from jupyter_disttrain.jobs.debug import answer_in_text
    from jupyter_disttrain.storage.store import JobStore

    store = JobStore(tmp_path / "jobs")
    job = api.submit(SCRIPT, store=store, name="cli", gpus=1, accelerator="cpu")
    try:
        prompts = Prompts()
        deadline = time.monotonic() + 120
        while not prompts.open:
            assert time.monotonic() < deadline and not job.status().is_terminal
            prompts.feed(list(job.logs("rank-0")))
            time.sleep(0.1)

        def no_stdin(_: str) -> str:
            raise RuntimeError("stdin is not allowed here")  # as IPython's StdinNotImplementedError

        said: list[str] = []
        assert answer_in_text(job.manager, job.id, prompts.open["rank-0"], no_stdin, said.append) is False
        assert f"`jupyter disttrain debug {job.id} --replica rank-0` in a terminal" in said[-1]
        answers = iter(["p x", "c"])
        monkeypatch.setattr("builtins.input", lambda _prompt="": next(answers))
        out: list[str] = []
        assert run_subcommand(["--root", str(store.root), "debug", job.id], out.append) == 0
        assert "41" in out and job.wait(timeout=120).phase.value == "Succeeded"
        with pytest.raises(DistTrainError, match=r"no rank of job .* waits in the debugger now"):
            run_subcommand(["--root", str(store.root), "debug", job.id], out.append)
    finally:
        job.cancel()
