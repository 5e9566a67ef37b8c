"""Warm start for several nodes: each node's torchrun agent forked from the zygote joins the job's
rendezvous and gives its ranks torchrun's own group ranks and environment (issue 36, step 1).

Two "nodes" on this machine (a local ``--nodes 2`` job: two agents meeting in one rendezvous), one
gloo rank each, warm and then cold; real forks, a real all-reduce across the agents.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.warm import forked
from jupyter_disttrain.backends.warm import plan as warm
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

PROBE = r"""
import json, os, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)  # across the two agents' ranks
with open(os.path.join(os.environ["PROBE_DIR"], f"{dist.get_rank()}.json"), "w") as f:
    json.dump({"env": dict(os.environ), "sum": total.item()}, f)
dist.destroy_process_group()
"""
# Differ between any two runs, warm or cold: where the store listens, torchrun's error dir, the
# switch itself.
PER_RUN = ("MASTER_PORT", "TORCHELASTIC_ERROR_FILE", warm.WARM_ENV)
# What the zygote's imports ahead set at their defaults (docs/warm-start.md, "What is not the
# same"): a cold rank has them too once its first optimizer step imported torch._dynamo.
IMPORTED_AHEAD = ("KMP_DUPLICATE_LIB_OK", "TORCHINDUCTOR_CACHE_DIR")


def _ranks(store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> list[dict]:
    monkeypatch.setenv(warm.WARM_ENV, "1" if how == "warm" else "0")
    out = tmp_path / how
    out.mkdir()
    job = api.submit(PROBE, store=store, gpus=1, nodes=2, name=f"two-{how}", env={"PROBE_DIR": str(out)})
    status = job.wait(timeout=180)
    assert status.phase is JobPhase.SUCCEEDED, status
    started = next(e.message for e in status.events if e.reason == "Started")
    assert f"({how}:" in started, started
    seen = []
    for rank in (0, 1):
        text = (out / f"{rank}.json").read_text().replace(job.id, "JOB").replace(str(out), "OUT")
        found = json.loads(text)
        for key in PER_RUN:
            found["env"].pop(key)
        for key in IMPORTED_AHEAD:
            found["env"].pop(key, None)
        seen.append(found)
    return seen


@pytest.mark.usefixtures("zygote_dir")
def test_each_node_forks_its_agent_and_its_ranks_are_torchruns(
    store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm_ranks = _ranks(store, tmp_path, monkeypatch, "warm")
    cold_ranks = _ranks(store, tmp_path, monkeypatch, "cold")
    assert [r["sum"] for r in warm_ranks] == [3.0, 3.0]  # 1 + 2, through both agents' ranks
    for rank, (hot, cold) in enumerate(zip(warm_ranks, cold_ranks, strict=True)):
        assert hot["env"]["GROUP_RANK"] == hot["env"]["RANK"] == str(rank)
        assert hot["env"]["WORLD_SIZE"] == hot["env"]["GROUP_WORLD_SIZE"] == "2"
        keys = sorted(hot["env"].keys() | cold["env"].keys())  # key by key
        assert [(k, hot["env"].get(k)) for k in keys] == [(k, cold["env"].get(k)) for k in keys]


def _await_in_child(payload: bytes | None) -> int:
    """The exit code of a forked 'rank' that waits for its environment on a pipe and is sent
    ``payload`` (None: SIGINT while it waits): 0 when it got the one sent, 2 when anything
    escaped the wait (it would have run on as the agent)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            os.close(write)
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a fresh interpreter's
            code = 0 if forked._await_env(read) == {"A": "1"} else 3
        finally:
            os._exit(code)
    os.close(read)
    if payload is None:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "S":
            assert time.monotonic() < deadline, "the rank never waited"
            time.sleep(0.01)
        os.kill(pid, signal.SIGINT)
    else:
        os.write(write, payload)
    os.close(write)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_rank_without_its_environment_ends_having_run_nothing() -> None:
    assert _await_in_child(b'{"A": "1"}') == 0
    # The agents never met (EOF), a cut-off message, another kind of message, a signal first.
    assert [_await_in_child(p) for p in (b"", b'{"A": ', b"[1]", None)] == [1, 1, 1, 1]
