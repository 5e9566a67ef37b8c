"""What the REST API does with jobs: ``JobManager``'s answers as JSON, and the submit body's checks.

Every method is blocking (files, cluster calls) and is meant to run in a worker thread. The
answers are the payloads of ``payloads/`` as JSON (``docs/rest-api.md``).
"""

from __future__ import annotations

from typing import Any

from ..jobs.checkpoints import which_of
from ..jobs.diagnosis import runs_with_hours
from ..jobs.intake import spec_from_json
from ..jobs.manager import JobManager
from ..model.errors import InvalidSpecError
from ..payloads import to_json
from ..payloads.jobs import CancelAnswer, DryRunAnswer, JobScript, JobSummary, SubmitAnswer
from ..payloads.runs import RunList, RunQuery
from ..storage.store import JobStore


class JobService:
    """The REST API's view of ``JobManager``: JSON in, JSON out."""

    def __init__(self, store: JobStore, default_backend: str) -> None:
        self.store = store
        self.manager = JobManager(store, default_backend)
        self.default_backend = default_backend

    def list_jobs(self) -> list[dict[str, Any]]:
        """Summaries of every job not deleted, newest first."""
        return [listed.summary for listed in self.manager.list_jobs()]

    def describe(self, job_id: str) -> dict[str, Any]:
        return to_json(self.manager.detail(job_id))

    def script(self, job_id: str) -> dict[str, Any]:
        record = self.store.read_record(job_id)
        return to_json(JobScript(job_id, record.spec.entrypoint, self.store.read_script(job_id)))

    def read_logs(self, job_id: str, **query: Any) -> dict[str, Any]:
        """A log page (``JobLogs.page``'s query: replica, offset, tail, limit)."""
        return to_json(self.manager.logs.page(job_id, **query))

    def resources(self, job_id: str, since: float | None = None) -> dict[str, Any]:
        """Every replica's resource samples newer than ``since`` (``JobManager.resources``)."""
        return to_json(self.manager.resources(job_id, since))

    def stack(self, job_id: str, replica: str, method: str | None = None) -> dict[str, Any]:
        """A replica's Python stacks (``JobManager.stack``)."""
        return to_json(self.manager.stack(job_id, replica, method))

    def list_runs(self, job: str | None = None) -> dict[str, Any]:
        """``RunList``: every run of every job, or of ``job`` (``JobManager.list_runs``), with the
        resource-hours of each."""
        return to_json(RunList(runs_with_hours(self.store, self.manager.list_runs(job))))

    def run_detail(self, job_id: str, run: str, **query: Any) -> dict[str, Any]:
        """``RunDetail`` (``JobManager.run_detail``'s query: since, limit, rank)."""
        return to_json(self.manager.run_detail(job_id, run, RunQuery(**query)))

    def submit(self, body: Any) -> dict[str, Any]:
        """Submit ``{"script": "...", "spec": {...}}``; answer ``{"id", "job": JobSummary}``.

        With ``"dry_run": true`` nothing is created or launched; the answer is
        ``{"dry_run": DryRun}``, the exact request a submit would carry out.
        """
        if not isinstance(body, dict):
            raise InvalidSpecError('send a JSON object: {"script": "...", "spec": {...}}')
        unknown = sorted(set(body) - {"script", "spec", "dry_run"})
        if unknown:
            raise InvalidSpecError(
                f"unknown field(s) {', '.join(map(repr, unknown))}; send script, spec, dry_run"
            )
        script, dry_run = body.get("script"), body.get("dry_run", False)
        if not isinstance(script, str) or not script.strip():
            raise InvalidSpecError('"script" must be the Python source of the training script')
        if not isinstance(dry_run, bool):
            raise InvalidSpecError('"dry_run" must be true or false')
        spec = spec_from_json(body.get("spec", {}), self.manager.default_backend)
        if dry_run:
            return to_json(DryRunAnswer(self.manager.dryrun(spec, script).to_json()))
        job_id = self.manager.submit(spec, script)
        record = self.store.read_record(job_id)
        return to_json(SubmitAnswer(job_id, JobSummary.of(record, self.manager.status(job_id))))

    def checkpoints(self, job_id: str) -> dict[str, Any]:
        """``CheckpointList`` (``JobManager.checkpoints``)."""
        return to_json(self.manager.checkpoints(job_id))

    def checkpoint_code(self, job_id: str, checkpoint: str) -> dict[str, Any]:
        """``CheckpointCode``: a cell loading the checkpoint with the script's model class."""
        return to_json(self.manager.job_checkpoints.load_code(job_id, checkpoint))

    def resume(self, job_id: str, body: Any) -> dict[str, Any]:
        """Submit the job again from ``{"checkpoint": "latest" | STEP | "<id>"}``: ``ResumeAnswer``."""
        if body is None:
            body = {}
        if not isinstance(body, dict) or set(body) - {"checkpoint"}:
            raise InvalidSpecError('send a JSON object {"checkpoint": "latest" | STEP | "<checkpoint id>"}')
        which = which_of(body.get("checkpoint", "latest"))
        self.store.read_record(job_id)  # an unknown job is a 404, not a bad checkpoint
        try:
            answer = self.manager.resume(job_id, which)
        except InvalidSpecError as exc:
            raise InvalidSpecError(f"checkpoint: {exc}") from None
        return to_json(answer)

    def resubmit(self, job_id: str, body: Any) -> dict[str, Any]:
        """Submit the job's own spec and script again, from the start: ``SubmitAnswer``."""
        if body not in (None, {}):
            raise InvalidSpecError("send no body (or {}): the job's own spec and script are submitted again")
        return to_json(self.manager.resubmit(job_id))

    def cancel(self, job_id: str) -> dict[str, Any]:
        return to_json(CancelAnswer(self.manager.cancel(job_id)))

    def delete(self, job_id: str, purge: bool = False) -> None:
        self.manager.delete(job_id, purge=purge)
