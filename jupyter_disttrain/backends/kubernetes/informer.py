"""Shared list+watch caches: one per (API server, namespace, kind) in the whole process.

However many jobs a notebook or the Jupyter server shows, their status comes from these caches:
each lists once, then watches from the list's resourceVersion; a dropped watch resumes from the
last resourceVersion seen, and ``410 Gone`` (history compacted) makes it list again. Reading a
job's status is then a dictionary lookup, so API traffic does not grow with the number of jobs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from ...model.errors import BackendError
from .client import ApiError, KubeClient, Resource

WATCH_TIMEOUT = 240  # seconds the server keeps one watch open before we renew it
_RETRY_MAX = 10.0


class Informer:
    """The latest copy of every object of one kind in one namespace (optionally label-filtered)."""

    def __init__(
        self,
        client: KubeClient,
        res: Resource,
        namespace: str,
        label_selector: str | None,
        index: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> None:
        self.client = client
        self._index_fn = index
        self._index: dict[str, set[str]] = {}
        self.res = res
        self.namespace = namespace
        self.label_selector = label_selector
        self.resource_version: str | None = None
        self.lists = 0  # how many full lists (1 + one per 410) — reported by tests and the bench
        self.watches = 0
        self.last_error: Exception | None = None
        self._objects: dict[str, dict[str, Any]] = {}
        self._changed = threading.Condition()
        self._generation = 0
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"disttrain-watch-{res.plural}-{namespace}", daemon=True
        )
        self._thread.start()

    # -- reading -----------------------------------------------------------------------------
    def wait_synced(self, timeout: float = 15.0) -> None:
        """Block until the first list arrived; raise the API's error if it cannot."""
        deadline = time.monotonic() + timeout
        while not self._synced.wait(0.05):
            err = self.last_error
            if isinstance(err, ApiError) and 400 <= err.status < 500 and err.status not in (410, 429):
                raise err  # refused (RBAC, CRD not installed...): retrying will not help this call
            if time.monotonic() > deadline:
                if self.last_error is not None:
                    raise BackendError(str(self.last_error))
                raise BackendError(f"no answer from the Kubernetes API listing {self.res.plural}")

    def get(self, name: str) -> dict[str, Any] | None:
        with self._changed:
            return self._objects.get(name)

    def items(self) -> list[dict[str, Any]]:
        with self._changed:
            return list(self._objects.values())

    def indexed(self, key: str) -> list[dict[str, Any]]:
        """Objects whose index key (e.g. the job id label) is ``key``: no scan of the rest."""
        with self._changed:
            return [self._objects[n] for n in sorted(self._index.get(key, ())) if n in self._objects]

    def _put(self, name: str, obj: dict[str, Any] | None) -> None:
        old = self._objects.pop(name, None)
        if old is not None and self._index_fn is not None:
            self._index.get(self._index_fn(old) or "", set()).discard(name)
        if obj is not None:
            self._objects[name] = obj
            key = self._index_fn(obj) if self._index_fn is not None else None
            if key is not None:
                self._index.setdefault(key, set()).add(name)

    @property
    def generation(self) -> int:
        return self._generation

    def stop(self) -> None:
        self._stop.set()

    # -- the loop ------------------------------------------------------------------------------
    def _run(self) -> None:
        delay = 0.2
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                self._watch()
                delay = 0.2
            except ApiError as exc:
                if exc.status == 410:
                    self.resource_version = None
                    continue
                self.last_error = exc
                self._stop.wait(delay)
                delay = min(delay * 2, _RETRY_MAX)
            except Exception as exc:  # connection dropped mid-stream, bad JSON: back off, resume
                self.last_error = exc
                self._stop.wait(delay)
                delay = min(delay * 2, _RETRY_MAX)

    def _list(self) -> None:
        data = self.client.list_objects(self.res, self.namespace, self.label_selector)
        with self._changed:
            self._objects, self._index = {}, {}
            for obj in data.get("items", []):
                self._put(obj["metadata"]["name"], obj)
            self.resource_version = data.get("metadata", {}).get("resourceVersion") or "0"
            self.lists += 1
            self._bump()
        self.last_error = None
        self._synced.set()

    def _watch(self) -> None:
        query = {
            "watch": True,
            "resourceVersion": self.resource_version,
            "labelSelector": self.label_selector,
            "allowWatchBookmarks": True,
            "timeoutSeconds": WATCH_TIMEOUT,
        }
        self.watches += 1
        for line in self.client.stream(
            self.res.path(self.namespace),
            query=query,
            resource=self.res,
            namespace=self.namespace,
            read_timeout=WATCH_TIMEOUT + 30,
        ):
            if self._stop.is_set():
                return
            if not line.strip():
                continue
            event = json.loads(line)
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                code = obj.get("code", 500)
                raise ApiError(obj.get("message", "watch error"), int(code), obj.get("reason", ""))
            rv = obj.get("metadata", {}).get("resourceVersion")
            with self._changed:
                name = obj.get("metadata", {}).get("name")
                if kind in ("ADDED", "MODIFIED") and name:
                    self._put(name, obj)
                elif kind == "DELETED" and name:
                    self._put(name, None)
                if rv:
                    self.resource_version = rv
                if kind != "BOOKMARK":
                    self._bump()

    def _bump(self) -> None:
        self._generation += 1
        self._changed.notify_all()


_lock = threading.Lock()
_informers: dict[tuple[str, str, str, str | None], Informer] = {}


def informer(
    client: KubeClient,
    res: Resource,
    namespace: str,
    label_selector: str | None,
    index: Callable[[dict[str, Any]], str | None] | None = None,
) -> Informer:
    """The process-wide informer for this server, namespace, kind and selector (started once).

    ``index`` (fixed by the first caller) maps an object to a key for ``Informer.indexed``.
    """
    key = (client.host, namespace, res.rbac_name, label_selector)
    with _lock:
        inf = _informers.get(key)
        if inf is None or inf._stop.is_set():
            inf = _informers[key] = Informer(client, res, namespace, label_selector, index)
        return inf


def all_informers() -> list[Informer]:
    with _lock:
        return list(_informers.values())


def stop_all() -> None:
    """Stop every informer (tests, server shutdown); the next use starts fresh ones."""
    with _lock:
        for inf in _informers.values():
            inf.stop()
        _informers.clear()
