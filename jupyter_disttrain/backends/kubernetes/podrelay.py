"""A rank's debugger prompt in its pod, through ``pods/exec``.

The rank listens on ``debug/<replica>.sock`` in its job dir as the pod sees it (on the PVC or a
scratch dir: ``$DISTTRAIN_JOB_DIR`` in the job's own pod; a job forked in a pool pod names its
own dir, the pod's variable being the first job's). Each exchange execs the relay (``runtime/debugrelay.py``,
standard library only, run from its source with the image's ``python3``) in the pod that runs
the rank: the pod of its node first (rank // processes per node), then the job's other pods.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...model.errors import BackendError, NoPromptError
from ...runtime import contract, debugrelay
from .client import KubeClient
from .podexec import exec_in_pod
from .rankpods import RankPods

RELAY = Path(debugrelay.__file__).read_text(encoding="utf-8")
_RANK = re.compile(r"rank-(\d+)")


def debug_in_pod(
    client: KubeClient, where: RankPods, replica: str, nproc: int, request: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """One exchange with ``replica``'s prompt (its answer), through the pod that runs it (its
    own, or the pool pod the job was forked in: ``rankpods.py``)."""
    if not where.pods:
        raise NoPromptError(f"{replica}: the job has no pod now")
    m = _RANK.fullmatch(replica)
    node = str(int(m.group(1)) // max(1, nproc)) if m else None
    pods_first = sorted(where.pods.items(), key=lambda item: item[0].rsplit("-", 1)[-1] != node)
    sock = f"{where.job_dir}/{contract.DEBUG_DIR}/{contract.debug_socket(replica)}"  # expanded in the pod
    argv = ["python3", "-c", RELAY, sock, json.dumps(request), str(timeout)]
    said: BackendError | None = None
    for _, pod in pods_first:
        try:
            text = exec_in_pod(client, where.namespace, pod["metadata"]["name"], where.container, argv)
        except BackendError as exc:  # not this pod's rank (no such socket here): the next one
            said = exc
            continue
        lines = text.strip().splitlines()
        try:
            return debugrelay.parse_answer(lines[-1].encode() if lines else b"")
        except debugrelay.RelayError as exc:
            raise BackendError(f"{replica}'s debugger: {exc}") from None
    raise NoPromptError(f"{replica}: {said}" if said else f"{replica}: no pod of the job has its debugger")
