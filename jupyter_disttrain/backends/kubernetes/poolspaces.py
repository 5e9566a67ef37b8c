"""Which namespaces the Kubernetes pool listing asks (docs/warm-start.md "Kubernetes pools"): the
default one and each namespace this user's jobs ran in (the store's Kubernetes records), so that a
pool kept by a job of ``--namespace team-b`` is listed, and released, as any other. A record is
read once it changed (a launched job's namespace never changes), so a listing costs a ``stat``
per job, not a read; at most ``MAX_NAMESPACES`` are asked, the default one first."""

from __future__ import annotations

from ...model.errors import UnknownJobError
from ...storage.store import JobStore

MAX_NAMESPACES = 20  # a pods/list each, per listing (the sidebar polls it)
_OTHER = ""  # a job of another backend: it never names a namespace


class JobNamespaces:
    """The namespaces of ``store``'s jobs of ``backend``, kept between listings."""

    def __init__(self, store: JobStore, backend: str) -> None:
        self.store = store
        self.backend = backend
        self.known: dict[str, tuple[tuple[int, ...], str | None]] = {}  # id: (its record's stat, ns)

    def namespaces(self, default: str | None) -> tuple[list[str], str | None]:
        """The namespaces to list, the default first, and a note naming how many were left out."""
        stats = {job_id: stat[:3] for job_id, stat in self.store.fingerprints().items()}
        for job_id, stat in stats.items():
            seen = self.known.get(job_id)
            if seen is None or (seen[1] is None and seen[0] != stat):
                self.known[job_id] = (stat, self._namespace_of(job_id))
        for gone in set(self.known) - set(stats):
            del self.known[gone]
        found = {ns for _, ns in self.known.values() if ns}
        ordered = ([default] if default else []) + sorted(found - {default})
        left = len(ordered) - MAX_NAMESPACES
        note = f"the pools of {left} more namespaces of your jobs are not listed" if left > 0 else None
        return ordered[:MAX_NAMESPACES], note

    def _namespace_of(self, job_id: str) -> str | None:
        """The job's namespace; ``_OTHER`` for a job of another backend, None while not launched."""
        try:
            record = self.store.read_record(job_id)
        except (OSError, ValueError, KeyError, UnknownJobError):  # being written: read once it changed
            return None
        if record.backend != self.backend:
            return _OTHER
        namespace = record.backend_state.get("namespace")
        return str(namespace) if namespace else None
