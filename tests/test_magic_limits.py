"""The magic's limits: ``--oversubscribe`` (the same words as the CLI and REST) and a cell view
that follows a runaway line in bounded pieces (issue 9, items 14 and 6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from test_magic import shell  # noqa: F401 - the fixture

from jupyter_disttrain.backends.local.devices import cpu_count
from jupyter_disttrain.storage.logfiles import CUT_MARKER
from jupyter_disttrain.storage.store import JobStore


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


def test_the_cell_view_follows_a_runaway_line_in_pieces(
    shell: InteractiveShell,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    cell = 'import sys\nsys.stdout.write("z" * 3_000_000)\nsys.stdout.flush()\nprint()\nprint("after it")'
    shell.run_cell_magic("distrun", "--gpus 1 --accelerator cpu", cell)
    out = capsys.readouterr().out
    assert "Succeeded" in out and "after it" in out
    assert CUT_MARKER in out
    assert max(len(line) for line in out.splitlines()) < 70_000  # pieces, never the whole line
