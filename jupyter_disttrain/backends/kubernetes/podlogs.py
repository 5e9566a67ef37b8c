"""Live output of a job's pods through ``pods/log`` (follow, tail, since), tagged by replica.

Used when the job dir is not on a shared PVC (otherwise the pods' log files are read, which
outlive the pods). Resume tokens count lines per replica: ``node-0:12,node-1:9``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...model.specs import LogLine
from ...runtime.contract import log_file
from ...storage.logfiles import CUT_MARKER, MAX_LINE, Budget, LogSource, format_offset, parse_offset, rank_of
from ...storage.store import JobRecord
from . import manifests as mf
from .client import PODS, ApiError, KubeClient
from .flavors import Flavor
from .informer import Informer

_RETRY = 0.5
# A one-off read (no follow) fetches at most this much of a pod's log, so no answer of the
# API server can take the server's memory; the PVC's log files have no such limit.
FETCH_BYTES = 32 << 20


def newest_per_replica(pods: list[dict[str, Any]], job_id: str, flavor: Flavor) -> dict[str, dict[str, Any]]:
    """Newest pod per replica name."""
    out: dict[str, dict[str, Any]] = {}
    for pod in pods:
        name = flavor.replica_of(job_id, pod)[0]
        old = out.get(name)
        if old is None or old["metadata"].get("creationTimestamp", "") <= pod["metadata"].get(
            "creationTimestamp", ""
        ):
            out[name] = pod
    return dict(sorted(out.items()))


def pod_log_lines(
    client: KubeClient,
    pods: Informer,
    record: JobRecord,
    flavor: Flavor,
    *,
    replica: str | None,
    follow: bool,
    tail: int | None,
    offset: str | int | None,
    since: int | None,
    is_done: Callable[[], bool],
    budget: Budget | None = None,
) -> Iterator[LogLine]:
    """Lines of every replica (or one), interleaved as they arrive when following.

    Tokens count lines here, so a line longer than ``MAX_LINE`` is cut (with ``CUT_MARKER``)
    and the rest of it is not shown; a ``budget`` ends the iterator once spent."""

    def job_pods() -> dict[str, dict[str, Any]]:
        return {
            rep: pod
            for rep, pod in newest_per_replica(pods.indexed(record.id), record.id, flavor).items()
            if replica in (None, rep)
        }

    current = job_pods()
    reader = _PodLogReader(client, flavor.container, list(current), tail, offset, since, budget)
    if follow:
        yield from reader.follow(job_pods, is_done)
    else:
        yield from reader.read_once(current)


class _PodLogReader:
    """One read of a job's ``pods/log``: per-replica line counts make the resume tokens, lines
    up to ``skip`` (the offset's counts) were read before."""

    def __init__(
        self,
        client: KubeClient,
        container: str,
        names: list[str],
        tail: int | None,
        offset: str | int | None,
        since: int | None,
        budget: Budget | None,
    ) -> None:
        self.client, self.container, self.names, self.budget = client, container, names, budget
        self.tail = tail if tail is not None and offset in (None, "") else None
        self.since = since
        self.skip = parse_offset(offset, names)
        self.counts = dict.fromkeys(names, 0)
        self.lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
        self.stop = threading.Event()

    def query(self, follow: bool) -> dict[str, Any]:
        return {
            "container": self.container,
            "follow": follow or None,
            "tailLines": self.tail,
            "sinceSeconds": self.since,
            "limitBytes": None if follow else FETCH_BYTES,
        }

    def read_once(self, current: dict[str, dict[str, Any]]) -> Iterator[LogLine]:
        for rep, pod in current.items():
            text = read_pod_log(self.client, pod, self.query(False))
            for line in (text or "").splitlines():
                out = self.emit(
                    rep, _text(line.encode("utf-8", "surrogateescape")) if len(line) > MAX_LINE else line
                )
                if self.stop.is_set():
                    return
                if out is not None:
                    yield out

    def follow(
        self, job_pods: Callable[[], dict[str, dict[str, Any]]], is_done: Callable[[], bool]
    ) -> Iterator[LogLine]:
        """Stream every replica's log, one thread each, starting replicas as their pods appear."""
        started: set[str] = set()
        open_streams = 0
        try:
            while True:
                for rep, pod in job_pods().items():
                    if rep not in started:
                        started.add(rep)
                        open_streams += 1
                        threading.Thread(target=self.pump, args=(rep, pod), daemon=True).start()
                try:
                    rep, text = self.lines.get(timeout=0.2)
                except queue.Empty:
                    if open_streams == 0 and is_done():
                        return
                    continue
                if text is None:
                    open_streams -= 1
                    continue
                out = self.emit(rep, text)
                if self.stop.is_set():
                    return
                if out is not None:
                    yield out
        finally:
            self.stop.set()

    def pump(self, rep: str, pod: dict[str, Any]) -> None:
        """Feed one pod's followed log into ``lines``; ``None`` when it ends."""
        ns, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        path = PODS.path(ns, pod_name, "log")
        query = self.query(True)
        while not self.stop.is_set():
            try:
                for raw in self.client.stream(path, query=query, resource=PODS, name=pod_name, namespace=ns):
                    if self.stop.is_set():
                        return
                    self.lines.put((rep, _text(raw)))
                break
            except ApiError as exc:
                if exc.status == 400:  # container not started yet: try again shortly
                    self.stop.wait(_RETRY)
                    continue
                break
        self.lines.put((rep, None))

    def emit(self, rep: str, text: str) -> LogLine | None:
        """The line with its resume token; None while skipping to the offset or once the
        budget is spent (which stops the read)."""
        self.counts[rep] = self.counts.get(rep, 0) + 1
        if rep not in self.names:
            self.names.append(rep)
        if self.counts[rep] <= self.skip.get(rep, 0):
            return None
        offset = format_offset(self.counts, self.names)
        if self.budget is not None and not self.budget.take(len(text) + len(offset) + 24):
            self.stop.set()
            return None
        return LogLine(text=text, replica=rep, offset=offset, rank=rank_of(_SRC, text))


def read_pod_log(client: KubeClient, pod: dict[str, Any], query: dict[str, Any]) -> str | None:
    """One read of a pod's log; ``None`` when it has none (not started yet, or gone)."""
    ns, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    try:
        text = client.request(
            "GET",
            PODS.path(ns, pod_name, "log"),
            query=query,
            resource=PODS,
            name=pod_name,
            namespace=ns,
            as_json=False,
        )
    except ApiError as exc:
        if exc.status in (400, 404):
            return None
        raise
    return str(text or "")


def keep_pod_logs(
    client: KubeClient, namespace: str, job_id: str, flavor: Flavor, logs_dir: Path
) -> list[str]:
    """Copy the last log of each of the job's pods to ``logs_dir/<replica>.log`` before the pods
    are deleted: without a shared job dir ``pods/log`` is the only copy, and it goes with the pod.
    Returns the replicas kept."""
    selector = f"{mf.JOB_ID_LABEL}={job_id}"
    pods = client.list_objects(PODS, namespace, selector).get("items", [])
    query = {"container": flavor.container, "limitBytes": FETCH_BYTES}
    kept = []
    for rep, pod in newest_per_replica(pods, job_id, flavor).items():
        text = read_pod_log(client, pod, query)
        if not text:
            continue
        logs_dir.mkdir(parents=True, exist_ok=True)
        (logs_dir / log_file(rep)).write_text(text if text.endswith("\n") else text + "\n", "utf-8")
        kept.append(rep)
    return kept


def _text(raw: bytes) -> str:
    """A line of a pod's log, cut at ``MAX_LINE`` bytes."""
    if len(raw) > MAX_LINE:
        return raw[:MAX_LINE].decode("utf-8", "replace") + CUT_MARKER
    return raw.decode("utf-8", "replace")


_SRC = LogSource("", Path())
