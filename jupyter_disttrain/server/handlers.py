"""REST handlers: thin adapters from HTTP to ``JobService`` and ``TensorBoardManager``.

Every verb is ``@web.authenticated`` (an API handler answers 403, never a login redirect).
Domain errors become HTTP errors in one place, ``domain_errors``; blocking work runs in the
extension's thread pool through ``DistTrainHandler.call``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import IO, Any, TypeVar
from urllib.parse import quote

from jupyter_server.base.handlers import APIHandler
from tornado import web
from tornado.iostream import StreamClosedError

from ..jobs.manager import JobManager
from ..model.errors import (
    BackendError,
    DistTrainError,
    InvalidSpecError,
    JobEndedError,
    NoPromptError,
    PackagingError,
    PoolBusyError,
    UnknownBackendError,
    UnknownCheckpointError,
    UnknownJobError,
    UnknownPoolError,
    UnknownReplicaError,
    UnknownRunError,
)
from ..model.specs import to_plain, validate_job_id
from ..payloads import to_json
from ..payloads.jobs import JobList, ServerInfo
from ..payloads.runs import TensorBoardList
from .context import SETTINGS_KEY, ServerContext

_T = TypeVar("_T")
_EVENT_STREAM = "text/event-stream; charset=utf-8"
_CHUNK = 1 << 20  # of an artifact download per write
# A resume token: a byte offset, or ``replica:offset,...`` (replica names are [A-Za-z0-9._-]).
# Checked before use because the stream echoes it in ``id:``, where a newline would start an event.
_OFFSET = re.compile(r"[A-Za-z0-9._:,-]{0,8192}")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # a JSON escape of half a surrogate pair

# The one table of domain error -> HTTP status; the first matching class wins.
_STATUS_OF: tuple[tuple[type[Exception], int], ...] = (
    (UnknownJobError, 404),
    (UnknownReplicaError, 404),
    (JobEndedError, 409),
    (NoPromptError, 409),
    (UnknownRunError, 404),
    (UnknownCheckpointError, 404),
    (UnknownPoolError, 404),
    (PoolBusyError, 409),
    (InvalidSpecError, 400),
    (PackagingError, 400),
    (UnknownBackendError, 400),
    (BackendError, 502),
    (DistTrainError, 500),
)


def http_error(exc: Exception) -> web.HTTPError:
    """The HTTP error a domain error stands for, carrying its one-line message."""
    for cls, status in _STATUS_OF:
        if isinstance(exc, cls):
            return web.HTTPError(status, "%s", str(exc), reason=type(exc).__name__)
    if isinstance(exc, ImportError):
        return web.HTTPError(
            502, "%s", f"a backend is not installed here: {exc}", reason="BackendUnavailable"
        )
    return web.HTTPError(500, "%s", f"internal error: {exc}", reason="InternalError")


@contextlib.contextmanager
def domain_errors() -> Iterator[None]:
    """Turn errors raised by the domain layer into HTTP errors (the one place that does)."""
    try:
        yield
    except web.HTTPError:
        raise
    except (DistTrainError, ImportError, OSError) as exc:
        raise http_error(exc) from exc


def write_json_error(handler: web.RequestHandler, **kwargs: Any) -> None:
    """Answer an error as JSON ``{"message", "reason"}`` (tornado's ``write_error`` arguments);
    the message says what went wrong and what to do."""
    exc = kwargs.get("exc_info", (None, None, None))[1]
    if isinstance(exc, web.HTTPError) and exc.log_message:
        message = exc.log_message % exc.args if exc.args else exc.log_message
        reply = {"message": message, "reason": exc.reason}
    elif exc is not None and not isinstance(exc, web.HTTPError):
        reply = {"message": "internal error; see the Jupyter server log", "reason": None}
    else:
        reply = {"message": handler._reason, "reason": None}
    handler.set_header("Content-Type", "application/json")
    handler.finish(json.dumps(reply))


class DistTrainHandler(APIHandler):
    """Base of the extension's API handlers: context, thread pool, JSON errors."""

    @property
    def ctx(self) -> ServerContext:
        context: ServerContext = self.settings[SETTINGS_KEY]
        return context

    async def call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run blocking ``fn`` in the extension's pool, translating domain errors."""
        return await self.call_in(self.ctx.executor, fn, *args, **kwargs)

    async def call_in(self, executor: Executor, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        loop = asyncio.get_running_loop()
        with domain_errors():
            return await loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))

    def get_json_body(self) -> Any:
        """The request's JSON body (None when empty). Read here, not by jupyter_server, whose
        reader answers 500 to bytes that are not UTF-8: any body that is not JSON text is a 400
        that says so (tornado bounds its size). A ``\\ud800`` escape with no pair is refused
        too: no UTF-8 file or record can hold the string it makes."""
        raw = self.request.body.strip()
        if not raw:
            return None
        try:
            body = json.loads(raw.decode("utf-8"))
            if _SURROGATE_ESCAPE.search(raw):
                json.dumps(body, ensure_ascii=False).encode("utf-8")
            return body
        except UnicodeDecodeError as exc:
            problem = f"byte {exc.start} (0x{raw[exc.start]:02x}) is not UTF-8"
        except UnicodeEncodeError:
            problem = "it escapes half of a surrogate pair (\\ud800-\\udfff alone), which is no text"
        except (ValueError, RecursionError) as exc:  # RecursionError: nested past Python's limit
            problem = f"it is not JSON ({str(exc) or 'nested too deep'})"
        raise web.HTTPError(400, "%s", f"the request body must be a JSON object in UTF-8: {problem}")

    def offset_argument(self, value: str | None) -> str | None:
        """A resume token from the client, or None; anything not shaped like one is a 400."""
        if not value:
            return None
        if not _OFFSET.fullmatch(value):
            raise web.HTTPError(
                400, "%s", "offset must be a resume token from an earlier answer (its 'offset')"
            )
        return value

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def int_argument(self, name: str) -> int | None:
        raw = self.get_argument(name, None)
        if raw in (None, ""):
            return None
        try:
            return int(raw)
        except ValueError:
            raise web.HTTPError(400, "%s", f"{name} must be a whole number, not {raw!r}") from None

    def float_argument(self, name: str) -> float | None:
        raw = self.get_argument(name, None)
        if raw in (None, ""):
            return None
        try:
            return float(raw)
        except ValueError:
            raise web.HTTPError(400, "%s", f"{name} must be a number, not {raw!r}") from None

    def bool_argument(self, name: str) -> bool:
        raw = (self.get_argument(name, "") or "").lower()
        if raw in ("", "0", "false", "no"):
            return False
        if raw in ("1", "true", "yes"):
            return True
        raise web.HTTPError(400, "%s", f"{name} must be true or false, not {raw!r}")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        write_json_error(self, **kwargs)


class JobsHandler(DistTrainHandler):
    @web.authenticated
    async def get(self) -> None:
        jobs = await self.call(self.ctx.service.list_jobs)
        # where the jobs were looked for: an empty list then says where it looked
        roots = [str(root) for root in self.ctx.service.store.roots()]
        self.write_json(to_json(JobList(jobs, roots)))

    @web.authenticated
    async def post(self) -> None:
        body = self.get_json_body()
        answer = await self.call(self.ctx.service.submit, body)
        if "dry_run" in answer:  # nothing was created
            self.write_json(answer)
            return
        self.set_header("Location", self.request.path.rstrip("/") + "/" + answer["id"])
        self.write_json(answer, status=201)


class JobHandler(DistTrainHandler):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        self.write_json(await self.call(self.ctx.service.describe, job_id))

    @web.authenticated
    async def delete(self, job_id: str) -> None:
        purge = self.bool_argument("purge")
        # Deleting a running job cancels it, which waits out its grace period: not in the shared pool.
        await self.call_in(self.ctx.cancel_executor, self.ctx.service.delete, job_id, purge)
        with domain_errors():
            await self.ctx.tensorboard.stop(job_id)  # it would show a job that is gone
        self.set_status(204)
        self.finish()


class ScriptHandler(DistTrainHandler):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        self.write_json(await self.call(self.ctx.service.script, job_id))


class CancelHandler(DistTrainHandler):
    @web.authenticated
    async def post(self, job_id: str) -> None:
        # A cancel waits up to the job's grace period: in threads of its own, so that
        # listings and log reads in the shared pool never queue behind it.
        self.write_json(await self.call_in(self.ctx.cancel_executor, self.ctx.service.cancel, job_id))


class ResourcesHandler(DistTrainHandler):
    """Every replica's resource samples newer than ``since`` (an earlier answer's ``now``)."""

    @web.authenticated
    async def get(self, job_id: str) -> None:
        since = self.float_argument("since")
        self.write_json(await self.call(self.ctx.service.resources, job_id, since))


class StackHandler(DistTrainHandler):
    """Dump a replica's Python stacks (a POST: it signals or ptraces the rank)."""

    @web.authenticated
    async def post(self, job_id: str, replica: str) -> None:
        method = self.get_argument("method", None)
        # py-spy may take seconds: in the threads of their own, not the shared pool.
        self.write_json(
            await self.call_in(self.ctx.cancel_executor, self.ctx.service.stack, job_id, replica, method)
        )


class LogsHandler(DistTrainHandler):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        limit = self.int_argument("limit")
        query = {
            "replica": self.get_argument("replica", None),
            "offset": self.offset_argument(self.get_argument("offset", None)),
            "tail": self.int_argument("tail"),
            "limit": 1000 if limit is None else limit,
        }
        chunk = await self.call(self.ctx.service.read_logs, job_id, **query)
        self.write_json(chunk)


class LogStreamHandler(DistTrainHandler):
    """Server-sent events: batches of new lines as they are written, then ``end``.

    Each batch is one step of ``JobLogs.follow`` from the last resume token (the status,
    then a bounded read), done in the thread pool, so no thread outlives a disconnect and no
    file is read whole; the token is the event id, so a client that reconnects with
    ``Last-Event-ID`` gets each line exactly once.
    """

    _closed = False

    def on_connection_close(self) -> None:
        self._closed = True

    @web.authenticated
    async def get(self, job_id: str) -> None:
        manager, ctx = self.ctx.service.manager, self.ctx
        replica = self.get_argument("replica", None)
        offset = self.offset_argument(
            self.request.headers.get("Last-Event-ID") or self.get_argument("offset", None)
        )
        tail = None if offset else self.int_argument("tail")
        # The first read happens before any header is sent, so bad input is still a JSON 4xx.
        batch = await self.call(_read_batch, manager, job_id, replica, offset, tail, ctx.log_batch_lines)
        self.set_header("Content-Type", _EVENT_STREAM)
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        loop = asyncio.get_running_loop()
        last_sent = loop.time()
        try:
            while not self._closed:
                offset = batch.offset or offset
                if batch.event:
                    self.write(batch.event)
                    await self.flush()
                    last_sent = loop.time()
                if batch.done:
                    # The position after every line: resuming from it gives nothing more ("" = none yet).
                    self.write(_sse("end", {"phase": batch.phase, "offset": offset or ""}, event_id=offset))
                    break
                if not batch.more:  # caught up: wait for new lines (else read on at once)
                    if loop.time() - last_sent >= ctx.keepalive_interval:
                        self.write(": keep-alive\n\n")  # also finds out that a client went away
                        await self.flush()
                        last_sent = loop.time()
                    await asyncio.sleep(ctx.log_poll_interval)
                # After the first read the position is carried by the token, never by tail.
                batch = await self.call(
                    _read_batch, manager, job_id, replica, offset, None, ctx.log_batch_lines
                )
        except StreamClosedError:
            return
        except web.HTTPError as exc:  # headers are out: report it as an event, not a status
            message = exc.log_message % exc.args if exc.log_message else str(exc)
            self.write(_sse("error", {"message": message, "status": exc.status_code}))
        if not self._closed:
            # APIHandler.finish sets application/json unless told otherwise, which would win
            # whenever nothing was flushed before the end (a stream that ends at once).
            self.finish(set_content_type=_EVENT_STREAM)


@dataclass
class _Batch:
    event: str | None  # the encoded ``lines`` event, None when there were no new lines
    offset: str
    more: bool  # stopped at its line or byte limit: more lines are there already
    done: bool
    phase: str  # the job's, read before the lines


def _read_batch(
    manager: JobManager, job_id: str, replica: str | None, offset: str | None, tail: int | None, limit: int
) -> _Batch:
    """One step of following, encoded as an event in the worker thread to spare the event loop."""
    step = manager.logs.follow(job_id, offset, replica=replica, tail=tail, limit=limit)
    page = step.page
    runs = [to_plain(run) for run in page.runs]
    event = _sse("lines", {"runs": runs, "offset": page.offset}, event_id=page.offset) if runs else None
    return _Batch(event, page.offset, page.more, page.done, step.status.phase.value)


def _sse(event: str, data: dict[str, Any], event_id: str | None = None) -> str:
    if event_id and not _OFFSET.fullmatch(event_id):  # tokens are ours, but never let one end a line
        raise ValueError(f"not a resume token: {event_id!r}")
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


class RunsHandler(DistTrainHandler):
    """Every run of experiment tracking (``em``), of every job or of ``?job=<id>``."""

    @web.authenticated
    async def get(self) -> None:
        job = self.get_argument("job", None) or None
        if job is not None:
            with domain_errors():
                validate_job_id(job)
        self.write_json(await self.call(self.ctx.service.list_runs, job))


class RunHandler(DistTrainHandler):
    """A run's record, artifacts, progress and its points from ``?since=`` (``next`` of the last answer)."""

    @web.authenticated
    async def get(self, job_id: str, run: str) -> None:
        query = {"since": self.int_argument("since"), "limit": self.int_argument("limit")}
        query["rank"] = self.int_argument("rank")
        self.write_json(await self.call(self.ctx.service.run_detail, job_id, run, **query))


class ArtifactHandler(DistTrainHandler):
    """An artifact file of a run, as a download, read and sent in chunks."""

    @web.authenticated
    async def get(self, job_id: str, run: str, path: str) -> None:
        manager = self.ctx.service.manager
        f = await self.call(manager.open_artifact, job_id, run, path)  # tornado unescaped it
        await self.send_file(f, path.rsplit("/", 1)[-1])

    async def send_file(self, f: IO[bytes], name: str) -> None:
        """Send an open file as a download, in chunks read in the pool; close it."""
        try:
            size = os.fstat(f.fileno()).st_size
            self.set_header("Content-Type", "application/octet-stream")
            self.set_header("Content-Length", str(size))
            self.set_header("Content-Disposition", f"attachment; filename*=UTF-8''{quote(name)}")
            self.set_header("X-Content-Type-Options", "nosniff")
            left = size  # the size at the open: a file still growing is sent as it was then
            while left > 0:
                chunk = await self.call(f.read, min(_CHUNK, left))
                if not chunk:
                    break
                left -= len(chunk)
                self.write(chunk)
                await self.flush()
        except StreamClosedError:
            return
        finally:
            f.close()
        self.finish(set_content_type="application/octet-stream")


class TensorBoardListHandler(DistTrainHandler):
    @web.authenticated
    async def get(self) -> None:
        self.write_json(to_json(TensorBoardList(self.ctx.tensorboard.list())))


class TensorBoardHandler(DistTrainHandler):
    """``GET`` says whether it runs, ``POST`` starts it (waits until it serves), ``DELETE`` stops it."""

    @web.authenticated
    async def get(self, tb_id: str) -> None:
        with domain_errors():
            self.write_json(to_json(self.ctx.tensorboard.info(tb_id)))

    @web.authenticated
    async def post(self, tb_id: str) -> None:
        with domain_errors():
            await self.ctx.tensorboard.ensure(tb_id)
            self.write_json(to_json(self.ctx.tensorboard.info(tb_id)))

    @web.authenticated
    async def delete(self, tb_id: str) -> None:
        with domain_errors():
            await self.ctx.tensorboard.stop(tb_id, must_exist=True)
        self.set_status(204)
        self.finish()


class TensorBoardReloadHandler(DistTrainHandler):
    """Make every event file on disk now visible: TensorBoard is restarted and read afresh."""

    @web.authenticated
    async def post(self, tb_id: str) -> None:
        with domain_errors():
            await self.ctx.tensorboard.reload(tb_id)
            self.write_json(to_json(self.ctx.tensorboard.info(tb_id)))


class InfoHandler(DistTrainHandler):
    """What the UI needs to know once: version, job root, backends."""

    @web.authenticated
    async def get(self) -> None:
        from .._version import __version__
        from ..backends import backend_names

        service = self.ctx.service
        info = ServerInfo(__version__, str(service.store.root), service.default_backend, backend_names())
        self.write_json(to_json(info))
