"""Run a command in a pod through ``pods/exec`` (a websocket, the ``kubernetes`` client's
``stream``), with its output bounded and RBAC refusals turned into what to grant."""

from __future__ import annotations

import json
import re
from typing import Any

from ...model.errors import BackendError
from .client import KubeClient

EXEC_TIMEOUT = 60.0
MAX_OUTPUT = 512 * 1024
# An exec websocket is an upgraded GET: the API server authorises it as get on pods/exec, and
# from Kubernetes 1.35 as create too (AuthorizePodWebsocketUpgradeCreatePermission).
GRANT = (
    "permission denied: this service account may not {verb} pods/exec in namespace {ns!r}; "
    "grant pods/exec verbs get and create in its Role, as deploy/rbac.yaml does, to read stacks"
)
# The verb in the API server's refusal: 'User "..." cannot create resource "pods/exec" ...'.
_REFUSED = re.compile(r'cannot (\w+) resource \\?"pods/exec')
# The message of the API server's Status at the end of a refused handshake.
_MESSAGE = re.compile(r'"message":\s*"((?:[^"\\]|\\.)*)"')


def exec_in_pod(client: KubeClient, namespace: str, pod: str, container: str, argv: list[str]) -> str:
    """The command's stdout in ``container`` (named always: injected sidecars make a pod of
    several, and then the API server answers 400 to an exec that names none); its stderr as a
    ``BackendError`` when it fails."""
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException
    from kubernetes.stream import stream

    # Output and errors, no stdin or tty; the socket kept open to read the status channel too.
    channels = {"stdout": True, "stderr": True, "stdin": False, "tty": False, "_preload_content": False}
    try:
        ws: Any = stream(
            CoreV1Api(client.api).connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=argv,
            container=container,
            **channels,
        )
    except ApiException as exc:
        if exc.status == 403 or "403" in str(exc.reason):
            refused = _REFUSED.search(str(exc.reason) + str(exc.body or ""))
            verb = refused.group(1) if refused else "get or create"
            raise BackendError(GRANT.format(verb=verb, ns=namespace)) from None
        raise BackendError(f"cannot exec in pod {pod}: {_said(str(exc.reason or exc))}") from None
    out, err = [], []
    try:
        ws.run_forever(timeout=EXEC_TIMEOUT)
        out.append(ws.read_stdout() or "")
        err.append(ws.read_stderr() or "")
        status = ws.read_channel(3)
    finally:
        ws.close()
    text, error = "".join(out)[:MAX_OUTPUT], "".join(err).strip()
    if status and json.loads(status).get("status") != "Success":
        raise BackendError(error.splitlines()[-1] if error else f"the command failed in pod {pod}")
    return text


def _said(reason: str) -> str:
    """What the API server said, from the client's whole handshake report (status line,
    headers, body), else that report."""
    found = _MESSAGE.search(reason)
    return json.loads(f'"{found.group(1)}"') if found else reason
