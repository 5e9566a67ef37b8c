"""REST handlers of a job's diagnoses (docs/rest-api.md "Diagnosis"): make one now, read one kept.

A diagnosis asks every rank's debug socket, each read bounded to seconds; it runs in the threads
that cancels and stack dumps use, never in the shared pool that listings and log reads need.
"""

from __future__ import annotations

from tornado import web

from ..payloads import to_json
from .handlers import DistTrainHandler


class DiagnoseHandler(DistTrainHandler):
    """Diagnose the running job now: the ``Incident`` (kept in the job dir under its name)."""

    @web.authenticated
    async def post(self, job_id: str) -> None:
        diagnoses = self.ctx.service.manager.diagnoses
        incident = await self.call_in(self.ctx.cancel_executor, diagnoses.diagnose, job_id)
        self.write_json(to_json(incident), status=201)


class IncidentHandler(DistTrainHandler):
    """One ``Incident`` of the job, by the name its details list."""

    @web.authenticated
    async def get(self, job_id: str, name: str) -> None:
        incident = await self.call(self.ctx.service.manager.diagnoses.incident, job_id, name)
        self.write_json(to_json(incident))
