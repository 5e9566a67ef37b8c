"""``%%distrun --oversubscribe``: the magic says the same as the CLI and REST (issue 9, item 14)."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from test_magic import shell  # noqa: F401 - the fixture

from jupyter_disttrain.backends.local import cpu_count
from jupyter_disttrain.store import JobStore


def test_more_processes_than_cpus_needs_oversubscribe(
    shell: InteractiveShell,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    many = cpu_count() + 1
    with pytest.raises(UsageError) as err:
        shell.run_cell_magic("distrun", f"--gpus {many} --accelerator cpu", "x = 1")
    message = str(err.value)
    cpus = cpu_count()
    assert f"--gpus {many} --nodes 1 starts {many} processes and this machine has {cpus} CPUs" in message
    assert "pass --oversubscribe" in message and "\n" not in message.strip()
    assert JobStore(tmp_path / "jobs").ids(include_deleted=True) == []
    shell.run_cell_magic("distrun", f"--gpus {many} --accelerator cpu --oversubscribe --dry-run", "x = 1")
    assert f"--nproc-per-node={many}" in capsys.readouterr().out
