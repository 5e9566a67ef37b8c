"""torchrun's --tee for a forked agent's ranks (backends/warm/tee.py): which streams are copied,
under which header, and that the copy holds whole lines, never two ranks' halves on one line."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from jupyter_disttrain.backends.warm import tee


def _envs(tmp_path: Path, n: int) -> list[dict[str, str]]:
    return [
        {"RANK": str(4 + r), "TORCHELASTIC_ERROR_FILE": str(tmp_path / f"{r}" / "error.json")}
        for r in range(n)
    ]


def test_the_tee_and_its_headers_are_torchruns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    envs = _envs(tmp_path, 3)
    options = argparse.Namespace(tee="1", redirects="0", local_ranks_filter="0,2")
    monkeypatch.delenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", raising=False)
    assert tee.tailed(options, "default", envs) == [
        (str(tmp_path / "0" / "stdout.log"), "[default0]:", 1),
        (str(tmp_path / "2" / "stdout.log"), "[default2]:", 1),
    ]
    monkeypatch.setenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank${rank}]:")
    options = argparse.Namespace(tee="3", redirects="0", local_ranks_filter=None)
    assert [(Path(f).name, h) for f, h, _ in tee.tailed(options, "default", envs)][:2] == [
        ("stdout.log", "[rank4]:"),
        ("stderr.log", "[rank4]:"),
    ]
    assert not tee.tees_any(argparse.Namespace(tee=None, redirects="3"), 2)


def test_the_copy_holds_whole_lines(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    pid, pipe = tee.fork_tailer([])
    tee.start(pipe, [(str(a), "[rank0]:", 1), (str(b), "[rank1]:", 1)])
    with a.open("w") as fa, b.open("w") as fb:
        for f, rank in ((fa, 0), (fb, 1)):  # each rank's line in two writes, as print -u makes it
            f.write(f"step {rank}")
            f.flush()
        for f in (fa, fb):
            f.write("\n")
            f.flush()
        fa.write("last, no newline")
    os.close(pipe)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    out = capfd.readouterr().out.splitlines()
    assert sorted(out) == ["[rank0]:last, no newline", "[rank0]:step 0", "[rank1]:step 1"]
