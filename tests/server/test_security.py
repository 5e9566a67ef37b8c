"""Every route needs Jupyter's auth; ids and replica names cannot reach outside the store."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.web import RequestHandler

from jupyter_disttrain.server.routes import ROUTES, check_examples

_VERBS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_WITH_BODY = {"POST", "PUT", "PATCH"}


def verbs_of(handler: type[RequestHandler]) -> list[str]:
    """The verbs ``handler`` implements itself (the proxy's GET lives in ``http_get``)."""
    own = []
    for verb in _VERBS:
        names = ["http_get", "get"] if verb == "GET" else [verb.lower()]
        for name in names:
            method = getattr(handler, name, None)
            if method is not None and getattr(method, "__module__", "").startswith("jupyter_disttrain"):
                own.append(verb)
                break
    return own


CASES = [(route.example, verb) for route in ROUTES for verb in verbs_of(route.handler)]


def test_route_table_is_consistent() -> None:
    check_examples()
    assert all(verbs_of(route.handler) for route in ROUTES)
    assert len(CASES) >= 16


def test_every_disttrain_route_of_the_server_is_in_the_table(jp_serverapp: Any) -> None:
    patterns = {re.escape("/a%40b/") + route.pattern for route in ROUTES}
    found = set()
    for rule in jp_serverapp.web_app.default_router.rules:
        for sub in getattr(rule.target, "rules", []):
            regex = getattr(sub.matcher, "regex", None)
            if regex is not None and "disttrain" in regex.pattern:
                found.add(regex.pattern.rstrip("$"))
    assert found, "no disttrain routes registered"
    unknown = {p for p in found if not any(p.endswith(r.pattern) for r in ROUTES)}
    assert not unknown, f"routes outside the table: {unknown}"
    assert len(found) == len(patterns)


async def status_of(jp_fetch: Any, *parts: str, **kwargs: Any) -> int:
    """The HTTP status of a request that is expected to fail."""
    try:
        response = await jp_fetch(*parts, allow_nonstandard_methods=True, follow_redirects=False, **kwargs)
    except HTTPClientError as exc:
        return exc.code
    return response.code


@pytest.mark.parametrize("auth", ["", "token not-the-token"])
async def test_without_valid_credentials_every_route_is_403(jp_fetch: Any, auth: str) -> None:
    wrong = []
    for path, verb in CASES:
        body = "{}" if verb in _WITH_BODY else None
        code = await status_of(
            jp_fetch, *path.split("/"), method=verb, body=body, headers={"Authorization": auth}
        )
        if code != 403:
            wrong.append((verb, path, code))
    assert not wrong


BAD_IDS = ["..", "%2e%2e", "%2Fetc%2Fpasswd", "Bad_ID", "a" * 70, "-lead", "x%00y", "%2E%2E%2F%2E%2E"]
JOB_ROUTES = [
    ("", "GET"),
    ("", "DELETE"),
    ("/script", "GET"),
    ("/logs", "GET"),
    ("/logs/stream", "GET"),
    ("/cancel", "POST"),
]


async def test_bad_job_ids_are_400_or_404(jp_fetch: Any) -> None:
    wrong = []
    for bad in BAD_IDS:
        for suffix, verb in JOB_ROUTES:
            body = "" if verb == "POST" else None
            code = await status_of(jp_fetch, "disttrain", "api", "jobs", bad + suffix, method=verb, body=body)
            if code not in (400, 404):
                wrong.append((verb, bad + suffix, code))
    assert not wrong


async def test_bad_tensorboard_ids_are_400_or_404(jp_fetch: Any) -> None:
    wrong = []
    for bad in ["..", "%2e%2e", "%2Fetc", "Bad_ID", "all", "no-such-job"]:
        for parts, verb in (
            (("api", "tensorboard", bad), "POST"),
            (("tensorboard", bad, "data", "runs"), "GET"),
        ):
            code = await status_of(
                jp_fetch, "disttrain", *parts, method=verb, body="" if verb == "POST" else None
            )
            if code not in (400, 404):
                wrong.append((verb, parts, code))
    assert not wrong


async def test_bad_replica_names_are_400(jp_fetch: Any, job_root: Any) -> None:
    from .test_tensorboard import make_job

    job_id = make_job(job_root, "rep")
    for replica in ["../rank-0", "..", "/etc/passwd", "a/b"]:
        for stream in ((), ("stream",)):
            code = await status_of(
                jp_fetch, "disttrain", "api", "jobs", job_id, "logs", *stream, params={"replica": replica}
            )
            assert code == 400, replica


async def test_xsrf_is_checked_for_cookie_authenticated_changes(
    jp_serverapp: Any, jp_fetch: Any, jp_http_port: int, jp_base_url: str, job_root: Any
) -> None:
    # (jp_fetch starts the HTTP server this test talks to with a cookie-keeping client.)
    from .test_tensorboard import make_job

    job_id = make_job(job_root, "xsrf")
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url}"
    client = AsyncHTTPClient()
    token = jp_serverapp.identity_provider.token
    # Log in the way a browser does: the token once in the URL, a login cookie from then on.
    first = await client.fetch(f"{base}api/status?token={token}")
    cookies = [c.split(";", 1)[0] for c in first.headers.get_list("Set-Cookie")]
    login = "; ".join(c for c in cookies if not c.startswith("_xsrf="))
    assert login

    ok = await client.fetch(f"{base}disttrain/api/jobs/{job_id}", headers={"Cookie": login})
    assert json.loads(ok.body)["id"] == job_id  # the cookie alone is enough to read

    for method, path in (("POST", f"jobs/{job_id}/cancel"), ("DELETE", f"jobs/{job_id}"), ("POST", "jobs")):
        request = HTTPRequest(
            f"{base}disttrain/api/{path}",
            method=method,
            body="{}" if method == "POST" else None,
            headers={"Cookie": login},
        )
        with pytest.raises(HTTPClientError) as info:
            await client.fetch(request)
        assert info.value.code == 403, path
        assert (job_root / job_id).exists() and not (job_root / job_id / "deleted").exists()

    xsrf = "deadbeefdeadbeef"  # double-submit: the same token as cookie and header
    allowed = await client.fetch(
        HTTPRequest(
            f"{base}disttrain/api/jobs/{job_id}",
            method="DELETE",
            headers={"Cookie": f"{login}; _xsrf={xsrf}", "X-XSRFToken": xsrf},
        )
    )
    assert allowed.code == 204
    assert (job_root / job_id / "deleted").exists()
