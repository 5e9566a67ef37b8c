"""REST handlers of a job's checkpoints (docs/rest-api.md "Checkpoints"): the list, a download
(a file as it is, a directory as a tar streamed with bounded memory), the code of a cell that
loads one, and resuming the job from one.

A directory's tar is written by ``tarfile`` in a thread of its own into a bounded queue of
chunks that the handler sends as they come: memory stays at a few chunks whatever the size,
and a client that goes away stops the writer. The handler waits for chunks on the event loop
(no thread of any pool is held by a download), and ends the stream short when the writer has
sent nothing for ``STALL_SECONDS``. Only regular files and directories go into the tar, each
file opened without blocking (a FIFO in the directory is left out, never waited on).
"""

from __future__ import annotations

import asyncio
import functools
import io
import logging
import os
import queue
import tarfile
import threading
from collections.abc import Iterator
from urllib.parse import quote

from tornado import web
from tornado.iostream import StreamClosedError

from ..storage.safefiles import is_real_file, open_regular
from .handlers import ArtifactHandler, DistTrainHandler

log = logging.getLogger(__name__)
CHUNK = 1 << 20  # bytes per chunk of a streamed tar
QUEUED = 4  # chunks the writer may be ahead of the client
STALL_SECONDS = 60.0  # without a chunk from the writer, the stream is ended short
_POLL = (0.005, 0.1)  # the first and the longest wait between looks at the queue
_DONE = object()


class CheckpointsHandler(DistTrainHandler):
    """``CheckpointList``: the job's checkpoints, oldest first, and the disk they use."""

    @web.authenticated
    async def get(self, job_id: str) -> None:
        self.write_json(await self.call(self.ctx.service.checkpoints, job_id))


class CheckpointCodeHandler(DistTrainHandler):
    """``CheckpointCode``: a notebook cell that loads the checkpoint ("Load in notebook")."""

    @web.authenticated
    async def get(self, job_id: str, checkpoint: str) -> None:
        self.write_json(await self.call(self.ctx.service.checkpoint_code, job_id, checkpoint))


class ResumeHandler(DistTrainHandler):
    """Submit the job again from ``{"checkpoint": "latest" | STEP | "<id>"}``: ``ResumeAnswer``."""

    action = "resume"

    @web.authenticated
    async def post(self, job_id: str) -> None:
        answer = await self.call(getattr(self.ctx.service, self.action), job_id, self.get_json_body())
        base = self.request.path.rstrip("/").rsplit("/", 2)[0]  # .../jobs
        self.set_header("Location", f"{base}/{answer['id']}")
        self.write_json(answer, status=201)


class ResubmitHandler(ResumeHandler):
    """Submit the job again from the start (no body): ``SubmitAnswer``."""

    action = "resubmit"


class CheckpointDownloadHandler(ArtifactHandler):
    """The checkpoint's file as it is, or its directory as a streamed tar."""

    @web.authenticated
    async def get(self, job_id: str, checkpoint: str) -> None:
        checkpoints = self.ctx.service.manager.job_checkpoints
        found = await self.call(checkpoints.downloadable, job_id, checkpoint)
        name = os.path.basename(found.path)
        if not os.path.isdir(found.path):
            await self.send_file(await self.call(open_regular, found.path), name)
            return
        self.set_header("Content-Type", "application/x-tar")
        self.set_header("Content-Disposition", f"attachment; filename*=UTF-8''{quote(name)}.tar")
        self.set_header("X-Content-Type-Options", "nosniff")
        chunks: queue.Queue[object] = queue.Queue(QUEUED)
        writer = threading.Thread(target=write_tar, args=(found.path, chunks, self._stop), daemon=True)
        writer.start()
        try:
            while (chunk := await self._next(chunks)) is not _DONE:
                if isinstance(chunk, BaseException):  # the headers are sent: end the stream short
                    raise chunk
                self.write(chunk)  # type: ignore[arg-type]
                await self.flush()
        except StreamClosedError:
            return
        finally:
            self._stop.set()
        self.finish()

    def on_connection_close(self) -> None:
        self._stop.set()  # the client left: the writer stops at its next chunk
        super().on_connection_close()

    @functools.cached_property
    def _stop(self) -> threading.Event:
        return threading.Event()

    async def _next(self, chunks: queue.Queue[object]) -> object:
        """The writer's next chunk, waited for on the event loop (growing pauses up to 0.1 s)."""
        delay, waited = _POLL[0], 0.0
        while True:
            try:
                return chunks.get_nowait()
            except queue.Empty:
                pass
            if self._stop.is_set():
                raise StreamClosedError()
            if waited >= STALL_SECONDS:
                raise TimeoutError(f"the checkpoint's tar writer sent nothing for {STALL_SECONDS:g} s")
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, _POLL[1])


class _Pipe(io.RawIOBase):
    """What ``tarfile`` writes to: whole chunks into the queue, waiting while it is full."""

    def __init__(self, chunks: queue.Queue[object], stop: threading.Event) -> None:
        self.chunks, self.stop, self.buffer = chunks, stop, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.buffer += data
        if len(self.buffer) >= CHUNK:
            self.put(bytes(self.buffer))
            self.buffer.clear()
        return len(data)

    def put(self, item: object) -> None:
        while True:
            if self.stop.is_set():
                raise OSError("the download was stopped")
            try:
                self.chunks.put(item, timeout=0.5)
                return
            except queue.Full:
                continue


def write_tar(path: str, chunks: queue.Queue[object], stop: threading.Event) -> None:
    """Write the directory ``path`` as a tar (regular files and directories; no link followed,
    nothing else: a FIFO, a socket or a device is left out)."""
    pipe = _Pipe(chunks, stop)
    try:
        with tarfile.open(fileobj=pipe, mode="w|") as tar:
            for full, arcname in _members(path):
                if os.path.isdir(full):
                    tar.add(full, arcname=arcname, recursive=False)
                    continue
                try:
                    f = open_regular(full)  # a FIFO swapped in since the listing is refused, not waited on
                except OSError as exc:
                    log.info("checkpoint download of %s: %s left out: %s", path, arcname, exc)
                    continue
                with f:
                    tar.addfile(tar.gettarinfo(arcname=arcname, fileobj=f), f)
        if pipe.buffer:
            pipe.put(bytes(pipe.buffer))
        pipe.put(_DONE)
    except Exception as exc:
        log.warning("checkpoint download of %s stopped: %s", path, exc)
        if not stop.is_set():
            pipe.put(exc)


def _members(path: str) -> Iterator[tuple[str, str]]:
    """(path, name in the tar) of the directory, its subdirectories and regular files, sorted."""
    top = os.path.basename(path.rstrip("/"))
    for folder, dirs, files in os.walk(path):  # os.walk follows no link to a directory
        dirs.sort()
        rel = os.path.relpath(folder, path)
        yield folder, top if rel == "." else os.path.join(top, rel)
        for name in sorted(files):
            full = os.path.join(folder, name)
            if is_real_file(full):  # no link, FIFO, socket or device
                yield full, os.path.join(top, os.path.relpath(full, path))
