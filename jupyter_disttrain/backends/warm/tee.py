"""torchrun's ``--redirects`` and ``--tee`` for a forked agent's ranks, as torch 2.13 does them
(``DefaultLogsSpecs.reify`` and ``TailLog``): a redirected stream goes to
``ATTEMPT_DIR/LOCAL_RANK/stdout.log`` (``stderr.log``); a tee'd one is also copied, line by line,
to the agent's own stream, each line after its header (``$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``,
else ``[ROLE LOCAL_RANK]:``). A Kubernetes pod's torchrun runs with ``--tee 3`` and the ``[rankN]:``
template: the pod log's lines say their rank, which the log views read; a forked job's lines
must say it too.

torch tails in threads; a forked agent keeps none (it forks each restart's ranks), so the copying
is done by a process forked with the ranks (``fork_tailer``), told the files once the attempt's
ranks have their environments and stopped once they have all ended. It copies whole lines only
(torch's tail may copy a line the rank has half written), so two ranks' lines never mix.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import string
from collections.abc import Mapping
from typing import Any

POLL = 0.1  # torch's TailLog interval
OUT, ERR = 1, 2  # the streams, as torch's ``Std`` flags and as this process's descriptors
NAMES = {OUT: "stdout.log", ERR: "stderr.log"}


def _maps(options: Any, nproc: int) -> tuple[dict[int, int], dict[int, int]]:
    """(redirected, tee'd) streams per local rank, as ``Std`` flags; tee'd streams are redirected."""
    from torch.distributed.elastic.multiprocessing.api import Std, to_map

    redirects = to_map(Std.from_str(getattr(options, "redirects", None) or "0"), nproc)
    tees = to_map(Std.from_str(getattr(options, "tee", None) or "0"), nproc)
    return (
        {rank: int(redirects[rank] | tees[rank]) for rank in range(nproc)},
        {rank: int(tees[rank]) for rank in range(nproc)},
    )


def _files(attempt_rank_dir: str) -> dict[int, str]:
    return {
        stream: os.path.join(attempt_rank_dir, name)
        for stream, name in ((OUT, "stdout.log"), (ERR, "stderr.log"))
    }


def tees_any(options: Any, nproc: int) -> bool:
    """Whether any rank's stream is copied to the agent's (a tailer is needed)."""
    return any(_maps(options, nproc)[1].values())


def redirect_rank(options: Any, local_rank: int, nproc: int, env: Mapping[str, str]) -> None:
    """In a forked rank, before it runs anything: its redirected streams to their files (its
    error file's dir is its dir of the attempt, as torch's)."""
    redirected = _maps(options, nproc)[0][local_rank]
    for stream, path in _files(os.path.dirname(env["TORCHELASTIC_ERROR_FILE"])).items():
        if redirected & stream:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, stream)
            os.close(fd)


def tailed(options: Any, role: str, envs: list[dict[str, str]]) -> list[tuple[str, str, int]]:
    """What the tailer copies: (file, header, stream) of each tee'd stream of the attempt."""
    _, tees = _maps(options, len(envs))
    wanted = getattr(options, "local_ranks_filter", None)
    keep = {int(r) for r in str(wanted).split(",")} if wanted else set(range(len(envs)))
    template = os.environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")
    out = []
    for local_rank, env in enumerate(envs):
        if local_rank not in keep:
            continue
        header = f"[{role}{local_rank}]:"
        if template:
            header = string.Template(template).safe_substitute(
                role_name=role, rank=env["RANK"], local_rank=local_rank
            )
        for stream, path in _files(os.path.dirname(env["TORCHELASTIC_ERROR_FILE"])).items():
            if tees[local_rank] & stream:
                out.append((path, header, stream))
    return out


def fork_tailer(close: list[int]) -> tuple[int, int]:
    """Fork the tailer (closing ``close`` there); its pid and the pipe to tell it the files
    (``start``) and, by closing it, that the ranks have ended."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd in [*close, write]:
                with contextlib.suppress(OSError):
                    os.close(fd)
            _tail(read)
            code = 0
        finally:
            os._exit(code)
    os.close(read)
    return pid, write


def start(pipe: int, files: list[tuple[str, str, int]]) -> None:
    with contextlib.suppress(OSError):
        os.write(pipe, json.dumps(files).encode() + b"\n")


def _tail(pipe: int) -> None:
    told = b""
    while not told.endswith(b"\n"):
        chunk = os.read(pipe, 65536)
        if not chunk:
            return  # the attempt never began
        told += chunk
    files = [_Tailed(path, header, stream) for path, header, stream in json.loads(told)]
    ended = False
    while not ended:
        ended = bool(select.select([pipe], [], [], POLL)[0]) and not os.read(pipe, 1)
        for tailed_file in files:
            tailed_file.copy(final=ended)


class _Tailed:
    def __init__(self, path: str, header: str, stream: int) -> None:
        self.path, self.header, self.stream = path, header.encode(), stream
        self.fd: int | None = None
        self.rest = b""

    def copy(self, final: bool) -> None:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return
        while chunk := os.read(self.fd, 1 << 16):
            self.rest += chunk
        *lines, self.rest = self.rest.split(b"\n")
        if final and self.rest:
            lines, self.rest = [*lines, self.rest], b""
        text = memoryview(b"".join(self.header + line + b"\n" for line in lines))
        with contextlib.suppress(OSError):
            while text:
                text = text[os.write(self.stream, text) :]
