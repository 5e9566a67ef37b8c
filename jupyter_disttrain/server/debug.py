"""REST: one exchange with a rank's pdb prompt (docs/rest-api.md "Debugging a rank").

The widget under a ``%%distrun`` cell sends what is typed in its debugger input here, through
the lab extension: the kernel is busy following the job. ``{"line": "p x"}`` sends a pdb
command, ``{}`` only looks; the answer is ``DebugAnswer``. ``q`` cancels the whole job.
"""

from __future__ import annotations

from typing import Any

from tornado import web

from ..jobs.debug import exchange
from ..jobs.manager import JobManager
from ..model.errors import InvalidSpecError
from ..payloads import to_json
from .handlers import DistTrainHandler


def debug_exchange(manager: JobManager, job_id: str, replica: str, body: Any) -> dict[str, Any]:
    """``body`` checked (a 400 naming the field), then the exchange; ``DebugAnswer`` as JSON."""
    if body is None:
        body = {}
    if not isinstance(body, dict) or set(body) - {"line"}:
        raise InvalidSpecError('the body is {"line": "a pdb command"}, or {} to only look')
    line = body.get("line")
    if line is not None and not isinstance(line, str):
        raise InvalidSpecError("line must be a string: one pdb command, e.g. 'p x'")
    return to_json(exchange(manager, job_id, replica, line))


class DebugHandler(DistTrainHandler):
    """``POST jobs/<id>/debug/<replica>``: one pdb command (or a look) at ``replica``'s prompt."""

    @web.authenticated
    async def post(self, job_id: str, replica: str) -> None:
        body = self.get_json_body()
        # An exchange waits for pdb (and ``q`` for the cancel): in the threads of their own.
        manager = self.ctx.service.manager
        self.write_json(
            await self.call_in(self.ctx.cancel_executor, debug_exchange, manager, job_id, replica, body)
        )
