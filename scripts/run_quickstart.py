"""Execute notebooks/quickstart.ipynb in a real kernel and report its job.

Prints what the cells printed, then the job's final status and the tail of its log. Exits
non-zero unless the job succeeded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from jupyter_disttrain import api
from jupyter_disttrain.cli import format_line, format_status
from jupyter_disttrain.store import JobStore

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "quickstart.ipynb"


def main() -> int:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    workdir = NOTEBOOK.parent
    started = time.time()
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
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
    return 0 if status.phase.value == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
