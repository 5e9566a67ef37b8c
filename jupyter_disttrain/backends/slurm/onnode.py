"""Reaching a rank on its Slurm node: its stacks, its debugger prompt, its collectives for a
diagnosis (``read_ranks``: the backend's, and a Slurm launcher's own when its guard diagnoses).

A rank's record names its node (``ranks/<replica>.json``, ``slurm/nodes/``). On this machine,
the job dir is enough; on another node, a one-task ``srun --overlap`` step of the job runs the
reader there (``stacks.py``, ``runtime/debugrelay.py``, ``runtime/debugsock.py``) and prints its
answer as JSON.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...model.errors import BackendError, NoPromptError
from ...runtime import contract
from ..debugaccess import debug_here
from . import client as slurm
from .node import node_file
from .status import read_dict

if TYPE_CHECKING:
    from ...model.specs import JobStatus
    from ...storage.store import JobRecord, JobStore


def node_of(job_dir: Path, replica: str) -> dict[str, Any] | None:
    """The Slurm node ``replica`` runs on (its record), or None when it is this machine or unknown."""
    rank = read_dict(job_dir / contract.RANKS_DIR / contract.record_file(replica))
    node = read_dict(Path(node_file(str(job_dir), int(rank.get("node", 0))))) if rank else None
    here = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    if node is None or not node.get("slurm_node") or node.get("slurm_node") == here:
        return None
    return node


def step_argv(node: dict[str, Any], job_id: str, what: str, module: str, *args: str) -> list[str]:
    """A one-task step on ``node`` of the job's allocation, running ``python -m module args``."""
    return [
        "srun",
        f"--jobid={node['job']}",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node['slurm_node']}",
        f"--job-name={job_id}-{what}",
        sys.executable,
        "-m",
        module,
        *args,
    ]


def debug(
    job_dir: Path, job_id: str, replica: str, request: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """One exchange with ``replica``'s prompt: through its socket here, else a step on its node."""
    node = node_of(job_dir, replica)
    if node is None:
        return debug_here(str(job_dir), replica, request, timeout)
    socket_path = str(job_dir / contract.DEBUG_DIR / contract.debug_socket(replica))
    argv = step_argv(
        node,
        job_id,
        "debug",
        "jupyter_disttrain.runtime.debugrelay",
        socket_path,
        json.dumps(request),
        str(timeout),
    )
    try:
        said = slurm.run(argv, timeout=timeout + 60).strip().splitlines()
    except slurm.SlurmCommandError as exc:
        raise NoPromptError(f"{replica}'s debugger on {node['slurm_node']}: {exc}") from None
    from ...runtime.debugrelay import RelayError, parse_answer

    try:
        return parse_answer(said[-1].encode() if said else b"")
    except RelayError as exc:
        raise BackendError(f"{replica}'s debugger on {node['slurm_node']}: {exc}") from None


def read_ranks(store: JobStore, record: JobRecord, status: JobStatus) -> dict[str, dict[str, Any]]:
    """Each rank's debug socket on its node: this node's here, another's through a step of the job
    running the collector there (``runtime/debugsock.py``), as stacks are read (the backend's, and
    a Slurm launcher's automatic diagnosis)."""
    from ...monitoring.incidents import collect_here

    job_dir = store.job_dir(record.id)
    names = [r.name for r in status.replicas]
    nodes: dict[str, tuple[dict[str, Any], list[str]]] = {}  # Slurm node -> (its record, ranks)
    for name in names:
        if (node := node_of(job_dir, name)) is not None:
            nodes.setdefault(str(node["slurm_node"]), (node, []))[1].append(name)
    elsewhere = {name for _, on_node in nodes.values() for name in on_node}
    answers = collect_here(job_dir, record.id, [n for n in names if n not in elsewhere])
    for where, (node, on_node) in sorted(nodes.items()):
        argv = step_argv(node, record.id, "diagnose", "jupyter_disttrain.runtime.debugsock", str(job_dir))
        try:
            found = json.loads(slurm.run(argv, timeout=30).strip().splitlines()[-1])
        except (slurm.SlurmCommandError, ValueError, IndexError) as exc:
            why = f"could not read it on node {where}: {exc}"
            found = {name: {"fr": None, "stack": None, "errors": {"fr_trace_json": why}} for name in on_node}
        answers.update({name: {**found[name], "method": "socket"} for name in on_node if name in found})
    return answers
