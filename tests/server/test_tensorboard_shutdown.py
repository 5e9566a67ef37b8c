"""A Jupyter server stopped by SIGTERM (systemd, ``docker stop``, a JupyterHub culler) after it
started a TensorBoard: its own shutdown runs, the TensorBoard ends and its socket dir is gone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

TOKEN = "sigterm-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ours(temp: Path) -> list[Path]:
    """The socket dirs in ``temp`` (TensorBoard keeps its own ``.tensorboard-info`` there too)."""
    return list(temp.glob("disttrain-tensorboard-*"))


def _request(url: str, method: str = "GET", deadline: float = 90.0) -> bytes:
    """The answer of the server once it listens (connection refused until then)."""
    end = time.monotonic() + deadline
    while True:
        request = urllib.request.Request(url, method=method, headers={"Authorization": f"token {TOKEN}"})
        try:
            with urllib.request.urlopen(request, data=b"{}" if method == "POST" else None, timeout=90) as r:
                return bytes(r.read())
        except urllib.error.URLError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def test_sigterm_runs_the_server_shutdown_and_removes_the_socket_dir(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"  # the server's temp dir: where the socket dir is made
    temp.mkdir()
    port = _free_port()
    argv = [sys.executable, "-m", "jupyter", "server", f"--port={port}", "--no-browser", "--allow-root"]
    argv += [f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={tmp_path}"]
    argv += [f"--DistTrainApp.job_root={tmp_path / 'jobs'}"]
    with open(tmp_path / "server.log", "wb") as log:
        server = subprocess.Popen(argv, env={**os.environ, "TMPDIR": str(temp)}, stdout=log, stderr=log)
    try:
        base = f"http://127.0.0.1:{port}/disttrain/api/tensorboard/_all"
        board = psutil.Process(json.loads(_request(base, "POST"))["pid"])
        assert len(ours(temp)) == 1
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
    said = (tmp_path / "server.log").read_text()
    assert "stopped TensorBoard _all" in said, said[-2000:]
    assert ours(temp) == []
    assert not board.is_running() or board.status() == psutil.STATUS_ZOMBIE
