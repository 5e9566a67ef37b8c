"""torchrun's agent command line around the rank wrapper: the one builder the local and the Slurm
backends both use (they differ only in how the agents meet: ``rendezvous``).

No process is started here, so the output can be compared line by line in tests and shown as
it is by ``--dry-run``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...model.specs import JobSpec

# The rank wrapper every rank runs under (``runtime/worker.py``): ``-m WORKER_MODULE SCRIPT ARGS``.
WORKER_MODULE = "jupyter_disttrain.runtime.worker"


def torchrun_argv(
    python: str,
    spec: JobSpec,
    job_id: str,
    node: int,
    program: Sequence[str],
    *,
    rdzv_backend: str,
    log_dir: str,
    endpoint: str | None = None,
    local_addr: str | None = None,
) -> list[str]:
    """torchrun's agent of node ``node`` running ``program`` (the script and its arguments) under
    the rank wrapper. Where the agents meet is the backend's: its rendezvous backend, the
    endpoint when it is known before the job runs (else torchrun reads ``PET_RDZV_ENDPOINT``),
    and the address the agent's store listens on. ``log_dir``: where torchrun keeps the ranks'
    error files (the job's own ``ELASTIC_DIR``)."""
    argv = [python, "-m", "torch.distributed.run", f"--nnodes={spec.nodes}", f"--rdzv-backend={rdzv_backend}"]
    if endpoint is not None:
        argv.append(f"--rdzv-endpoint={endpoint}")
    argv += [f"--rdzv-id={job_id}", f"--rdzv-conf=is_host={'true' if node == 0 else 'false'}"]
    if local_addr is not None:
        argv.append(f"--local-addr={local_addr}")
    return [
        *argv,
        f"--nproc-per-node={spec.nproc_per_node}",
        f"--max-restarts={spec.max_restarts}",
        f"--log-dir={log_dir}",
        "-m",
        WORKER_MODULE,
        *program,
    ]
