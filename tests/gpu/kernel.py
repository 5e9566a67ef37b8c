"""A real IPython kernel driven through jupyter_client, as a notebook front end drives it: each
cell's printed text, its error (with the traceback as plain text) and how long it took."""

from __future__ import annotations

import json
import queue
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

KERNEL_NAME = "gpu-check-python"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class CellRun:
    """What one cell did: its stream text, its error (None when it ran through), its wall time,
    and the epoch time at which it was sent."""

    text: str
    error: str | None
    seconds: float
    sent: float


def write_kernelspec(kernels: Path) -> None:
    """A kernelspec for this very interpreter in the directory ``kernels``: the kernel runs the
    Python the check runs, whatever kernelspecs are installed or missing (the GPU machine has
    none; wheels installed with ``--target`` put none where Jupyter looks)."""
    spec_dir = kernels / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python (gpu check)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))


class Kernel:
    """One kernel process in ``cwd`` with ``env``, from the kernelspec in ``kernels``
    (``write_kernelspec``); ``run`` executes a cell and waits for it."""

    def __init__(self, cwd: Path, env: dict[str, str], kernels: Path, ready_timeout: float = 120.0) -> None:
        specs = KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)
        self.manager = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)
        self.manager.start_kernel(cwd=str(cwd), env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=ready_timeout)
        except Exception:
            self.close()
            raise

    def run(self, code: str, timeout: float) -> CellRun:
        """Execute ``code``; its output once the kernel is idle again, or a ``TimeoutError``
        after ``timeout`` seconds (the kernel is interrupted first, so the next cell can run)."""
        sent = time.time()
        start = time.monotonic()
        msg_id = self.client.execute(code)
        text: list[str] = []
        error: str | None = None
        deadline = start + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.manager.interrupt_kernel()
                raise TimeoutError(f"the cell ran past {timeout:.0f} s; its output so far:\n{''.join(text)}")
            try:
                msg: dict[str, Any] = self.client.get_iopub_msg(timeout=min(left, 5.0))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                text.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                text.append(str(content.get("data", {}).get("text/plain", "")) + "\n")
            elif kind == "error":
                error = (
                    _ANSI.sub("", "\n".join(content["traceback"]))
                    or f"{content['ename']}: {content['evalue']}"
                )
            elif kind == "status" and content["execution_state"] == "idle":
                return CellRun("".join(text), error, time.monotonic() - start, sent)

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
