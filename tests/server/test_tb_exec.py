"""TensorBoard's wrapper: what it runs ends when the Jupyter server is killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen(
        [sys.executable, "-m", "jupyter_disttrain.server.tb_exec", str(os.getpid()), "sleep", "300"],
        start_new_session=True,
    )
    print(child.pid, flush=True)
    time.sleep(300)
    """
)


def test_the_wrapped_command_dies_with_its_server() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = psutil.Process(int(parent.stdout.readline()))
    deadline = time.monotonic() + 30
    while child.name() != "sleep":  # exec'd into the command
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(parent.pid, signal.SIGKILL)  # no chance to clean up
    parent.wait()
    child.wait(timeout=30)  # raises TimeoutExpired if it outlived its server


def test_it_refuses_to_start_when_the_server_is_already_gone() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.server.tb_exec", "1", "sleep", "300"], timeout=30
    )
    assert done.returncode == 1
