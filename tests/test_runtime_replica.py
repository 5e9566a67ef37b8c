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
