"""Execute notebooks/quickstart.ipynb in a real kernel and report its job.

Prints what the cells printed, then the job's final status and the tail of its log. Exits
non-zero unless the job succeeded.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from traitlets.config import Config

from jupyter_disttrain import api
from jupyter_disttrain.commands import format_line, format_status
from jupyter_disttrain.storage.store import JobStore

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "quickstart.ipynb"


def main() -> int:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    workdir = NOTEBOOK.parent
    started = time.time()
    print(f"== running {NOTEBOOK.name} in a headless kernel (~1 min)", flush=True)
    with tempfile.TemporaryDirectory(prefix="disttrain-kernel-") as sockets:
        # IPC (Unix sockets in a private dir) rather than TCP: a local kernel needs no network,
        # and ipykernel warns about unencrypted TCP.
        ipc = Config({"KernelManager": {"transport": "ipc", "ip": str(Path(sockets) / "kernel")}})
        NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(workdir)}},
            config=ipc,
        ).execute()
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            if text:
                print(text.rstrip())
    store = JobStore(workdir / ".disttrain" / "jobs")
    records = [r for r in store.records() if r.spec.name == "quickstart"]
    if not records:
        print("no quickstart job was found in", store.root, file=sys.stderr)
        return 1
    job = api.get_job(records[0].id, store)
    status = job.wait()
    print(f"\n== job {job.id} ({time.time() - started:.1f} s) ==")
    print(format_status(status))
    print("== log tail ==")
    for line in job.logs(tail=6):
        if line.rank is not None:
            print(format_line(line))
    print(f"\n== the job's files: {job.dir}")
    print(f"   from a terminal (with .venv active): jupyter disttrain status {job.id}")
    print(f"                                        jupyter disttrain logs {job.id}")
    return 0 if status.phase.value == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
