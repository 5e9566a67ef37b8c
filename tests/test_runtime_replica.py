"""The rank wrapper for processes that are not torch ranks (a parameter-server job's scheduler,
servers and workers): named by ``DISTTRAIN_REPLICA``, and one whose script fails ends at once
instead of waiting at teardown for peers that wait for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jupyter_disttrain.runtime import contract

# Stands in for MXNet's kvstore, whose teardown waits in a barrier for every worker: a thread
# that never ends keeps a plain interpreter from exiting.
FAILS_WITH_A_WAITING_PEER = """
import threading
threading.Thread(target=threading.Event().wait).start()
print("about to fail", flush=True)
raise RuntimeError("boom on worker-1")
"""


def _run(tmp_path: Path, script: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    (tmp_path / "logs").mkdir()
    path = tmp_path / "train.py"
    path.write_text(script)
    inherited = {k: v for k, v in os.environ.items() if k not in ("RANK", "DMLC_ROLE")}
    full = {
        **inherited,
        contract.LOG_DIR_ENV: str(tmp_path / "logs"),
        "PYTHONPATH": os.pathsep.join(sys.path),
        **env,
    }
    argv = [sys.executable, "-m", "jupyter_disttrain.runtime.worker", str(path)]
    return subprocess.run(argv, env=full, timeout=60, check=False)


def test_a_failed_parameter_server_worker_exits_at_once_named_by_its_replica(tmp_path: Path) -> None:
    env = {"DMLC_ROLE": "worker", contract.REPLICA_ENV: "worker-1"}
    done = _run(tmp_path, FAILS_WITH_A_WAITING_PEER, env)
    assert done.returncode == 1
    log = (tmp_path / "logs" / "worker-1.log").read_text()
    assert "about to fail" in log and "RuntimeError: boom on worker-1" in log
    record = json.loads((tmp_path / contract.RANKS_DIR / "worker-1.json").read_text())
    assert record["replica"] == "worker-1" and record["exit_code"] == 1


def test_a_torch_rank_keeps_its_rank_name(tmp_path: Path) -> None:
    done = _run(tmp_path, "print('hi')\n", {"RANK": "3"})
    assert done.returncode == 0
    assert (tmp_path / "logs" / "rank-3.log").read_text() == "hi\n"
    assert json.loads((tmp_path / contract.RANKS_DIR / "rank-3.json").read_text())["exit_code"] == 0


# Dumps its stacks the way the stack route asks for them, unless its wrapper said it cannot.
SIGNALS_ITSELF = """
import os, signal, time
with open(os.path.join(os.environ["DISTTRAIN_LOG_DIR"], "rank-0.log")) as f:
    said = f.read()
if "no stack dumps" not in said:
    os.kill(os.getpid(), signal.SIGUSR2)
    time.sleep(0.5)
print("done", flush=True)
"""


def test_a_link_planted_for_the_stack_dump_is_not_followed(tmp_path: Path) -> None:
    """Someone who can write to the job root plants ``stacks/rank-0.txt -> <a file of theirs or
    yours>`` before the rank starts: the rank's stacks never land in that file."""
    outside = tmp_path / "outside.txt"
    outside.write_text("not the job's\n")
    (tmp_path / contract.STACKS_DIR).mkdir()
    (tmp_path / contract.STACKS_DIR / "rank-0.txt").symlink_to(outside)
    done = _run(tmp_path, SIGNALS_ITSELF, {"RANK": "0"})
    assert outside.read_text() == "not the job's\n"
    log = (tmp_path / "logs" / "rank-0.log").read_text()
    assert "no stack dumps on SIGUSR2 for this rank" in log and "done" in log
    assert done.returncode == 0


def test_a_link_planted_for_the_log_is_not_appended_to(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not the job's\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank-0.log").symlink_to(outside)
    path = tmp_path / "train.py"
    path.write_text("print('secret output')\n")
    env = {**os.environ, contract.LOG_DIR_ENV: str(tmp_path / "logs"), "RANK": "0"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    argv = [sys.executable, "-m", "jupyter_disttrain.runtime.worker", str(path)]
    done = subprocess.run(argv, env=env, timeout=60, check=False, capture_output=True)
    assert done.returncode != 0 and b"Too many levels of symbolic links" in done.stderr
    assert outside.read_text() == "not the job's\n"


def test_a_link_planted_for_an_agents_log_is_not_appended_to(tmp_path: Path) -> None:
    """The launcher opens ``logs/agent-0.log`` for the torchrun agent's output the way the rank
    wrapper opens its log: a planted link fails the start, saying why, and the target is untouched."""
    from jupyter_disttrain.backends.agents.request import AgentCommand, LocalRequest
    from jupyter_disttrain.backends.local import launch

    outside = tmp_path / "outside.txt"
    outside.write_text("not the job's\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / contract.log_file(contract.agent_name(0))).symlink_to(outside)
    request = LocalRequest(
        cwd=str(tmp_path),
        agents=[AgentCommand(node=0, argv=[sys.executable, "-c", "print('agent output')"], env={})],
    )
    agents, _, error = launch.start(str(tmp_path), request)
    assert agents == [] and error is not None and "Too many levels of symbolic links" in error
    assert outside.read_text() == "not the job's\n"


# Logs two points and raises at once (before em's writer thread wakes); its exit then aborts the
# process before em's atexit handler, as a broken process group's teardown can.
RAISES_THEN_ABORTS_AT_EXIT = """
import atexit, os
from jupyter_disttrain import em
run = em.create_run("train")
run.log("train", {"loss": 1.0}, step=0)
run.log("train", {"loss": 0.5}, step=1)
atexit.register(os.abort)
raise ValueError("bad batch")
"""


def test_a_script_that_raises_has_its_runs_written_before_the_exit(tmp_path: Path) -> None:
    env = {contract.JOB_DIR_ENV: str(tmp_path), contract.TENSORBOARD_DIR_ENV: str(tmp_path / "tb")}
    done = _run(tmp_path, RAISES_THEN_ABORTS_AT_EXIT, env)
    assert done.returncode < 0  # the abort: nothing after the script's end ran
    run_dir = tmp_path / contract.RUNS_DIR / "train"
    steps = [json.loads(line)["step"] for line in (run_dir / contract.METRICS_FILE).read_text().splitlines()]
    assert steps == [0, 1]
    record = json.loads((run_dir / contract.RUN_FILE).read_text())
    assert (record["status"], record["reason"]) == ("failed", "ValueError: bad batch")
