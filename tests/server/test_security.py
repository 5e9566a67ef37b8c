"""Every route needs Jupyter's auth; ids and replica names cannot reach outside the store."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import sys
from typing import Any
from urllib.parse import unquote

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.web import RequestHandler

from jupyter_disttrain.server.routes import ROUTES, check_examples
from jupyter_disttrain.storage.store import JobStore

from .conftest import poll

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
    ("/runs/mnist", "GET"),
    ("/runs/mnist/artifacts/model/model.pt", "GET"),
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


async def cookie_login(jp_serverapp: Any, jp_http_port: int, jp_base_url: str) -> tuple[str, str]:
    """``(base URL, login cookie)`` as a browser has them after opening the token URL once."""
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url}"
    first = await AsyncHTTPClient().fetch(f"{base}api/status?token={jp_serverapp.identity_provider.token}")
    cookies = [c.split(";", 1)[0] for c in first.headers.get_list("Set-Cookie")]
    login = "; ".join(c for c in cookies if not c.startswith("_xsrf="))
    assert login
    return base, login


async def raw_status(request: HTTPRequest) -> int:
    try:
        return (await AsyncHTTPClient().fetch(request)).code
    except HTTPClientError as exc:
        return exc.code


async def test_every_changing_route_needs_xsrf_with_a_cookie(
    jp_serverapp: Any, jp_fetch: Any, jp_http_port: int, jp_base_url: str, job_root: Any
) -> None:
    # Every non-GET verb of every route in the table, the TensorBoard proxy included,
    # from a cookie-authenticated client that sends no XSRF token: refused before any work.
    from .test_tensorboard import make_job

    job_id = make_job(job_root, "demo")
    base, login = await cookie_login(jp_serverapp, jp_http_port, jp_base_url)
    changing = [(path.replace("demo-abcde", job_id), verb) for path, verb in CASES if verb not in _SAFE]
    assert {"disttrain/tensorboard/_all/data/plugins_listing"} <= {p for p, _ in changing}
    wrong = []
    for path, verb in changing:
        request = HTTPRequest(
            base + path,
            method=verb,
            body="{}" if verb in _WITH_BODY else None,
            headers={"Cookie": login},
            allow_nonstandard_methods=True,
            follow_redirects=False,
        )
        code = await raw_status(request)
        if code != 403:
            wrong.append((verb, path, code))
    assert not wrong
    manager = jp_serverapp.web_app.settings["jupyter_disttrain"].tensorboard
    assert manager.list() == []  # no TensorBoard was started by a refused request
    assert (job_root / job_id / "job.json").exists() and not (job_root / job_id / "deleted").exists()


_SAFE = {"GET", "HEAD", "OPTIONS"}


async def test_tensorboard_proxy_checks_xsrf_and_origin_and_strips_credentials(
    jp_serverapp: Any, jp_fetch: Any, jp_http_port: int, jp_base_url: str, job_root: Any, tmp_path: Any
) -> None:
    from .test_tensorboard import make_job

    job_id = make_job(job_root, "prox")
    base, login = await cookie_login(jp_serverapp, jp_http_port, jp_base_url)
    url = f"{base}disttrain/tensorboard/{job_id}/data/plugin/scalars/scalars_multirun"
    xsrf = "cafebabecafebabe"
    with_xsrf = {"Cookie": f"{login}; _xsrf={xsrf}", "X-XSRFToken": xsrf}
    # A cookie and the XSRF token: a same-site page's POST reaches TensorBoard.
    ok = await AsyncHTTPClient().fetch(
        HTTPRequest(url, method="POST", body="tag=x&runs=[]", headers=with_xsrf, request_timeout=60)
    )
    assert ok.code == 200
    # Another site's page (which somehow has the XSRF cookie too): refused by Jupyter's Origin rule.
    token = jp_serverapp.identity_provider.token
    cross = HTTPRequest(url, method="POST", body="", headers={**with_xsrf, "Origin": "http://evil.example"})
    assert await raw_status(cross) in (403, 404)

    # What reaches TensorBoard: take its socket's place with a listener that records the request.
    inst = jp_serverapp.web_app.settings["jupyter_disttrain"].tensorboard._instances[job_id]
    seen: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1)) if b"ength" in head else 0
        seen.append(head + await reader.readexactly(length))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    inst.socket_path.unlink()
    listener = await asyncio.start_unix_server(record, path=str(inst.socket_path))
    try:
        request = HTTPRequest(
            f"{base}disttrain/tensorboard/{job_id}/data/x?token={token}&keep=1",
            method="DELETE",
            body=b'{"a": 1}',  # a body on DELETE is forwarded, not a 500
            headers={"Authorization": f"token {token}", "Cookie": with_xsrf["Cookie"]},
            allow_nonstandard_methods=True,
        )
        assert (await AsyncHTTPClient().fetch(request)).code == 200
    finally:
        listener.close()
    (forwarded,) = seen
    upstream = f"{unquote(jp_base_url)}disttrain/tensorboard/{job_id}/data/x?keep=1"
    assert forwarded.startswith(f"DELETE {upstream} ".encode())
    assert token.encode() not in forwarded and b"cookie" not in forwarded.lower()
    assert b"authorization" not in forwarded.lower() and forwarded.endswith(b'{"a": 1}')
    # An error of the proxy itself is JSON too.
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("disttrain", "tensorboard", "no-such-job-abcde", "data", "x")
    assert info.value.code == 404 and info.value.response is not None
    assert json.loads(info.value.response.body)["reason"] == "UnknownJobError"


_OTHER_USER = """
import os, socket, sys
os.setgroups([]); os.setgid(65534); os.setuid(65534)  # nobody
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("refused")
else:
    print("connected")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another uid (nobody)")
async def test_another_local_user_cannot_reach_tensorboard(
    jp_fetch: Any, jp_serverapp: Any, job_root: Any
) -> None:
    from .test_tensorboard import make_job

    job_id = make_job(job_root, "uid")
    page = await jp_fetch("disttrain", "tensorboard", job_id, "data", "plugins_listing", request_timeout=60)
    assert page.code == 200  # the proxied route works
    inst = jp_serverapp.web_app.settings["jupyter_disttrain"].tensorboard._instances[job_id]
    assert stat.S_IMODE(inst.socket_path.parent.stat().st_mode) == 0o700
    probe = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _OTHER_USER, str(inst.socket_path), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await probe.communicate()
    assert out.decode().strip() == "refused"
    # and no TCP port at all in TensorBoard's process tree that the user could try instead
    from .test_tensorboard import listening_addresses

    assert listening_addresses(inst.process.pid) == set()


async def test_tensorboards_own_page_can_post_with_a_cookie(
    jp_serverapp: Any, jp_fetch: Any, jp_http_port: int, jp_base_url: str, job_root: Any
) -> None:
    # TensorBoard's page (Angular) posts with X-XSRF-TOKEN read from the XSRF-TOKEN cookie:
    # the proxy hands it Jupyter's XSRF token under that name, so a browser's tab keeps working.
    from .test_tensorboard import make_job

    job_id = make_job(job_root, "page")
    base, login = await cookie_login(jp_serverapp, jp_http_port, jp_base_url)
    page = await AsyncHTTPClient().fetch(
        HTTPRequest(f"{base}disttrain/tensorboard/{job_id}/", headers={"Cookie": login}, request_timeout=60)
    )
    cookies = dict(c.split(";", 1)[0].split("=", 1) for c in page.headers.get_list("Set-Cookie"))
    assert "XSRF-TOKEN" in cookies and "_xsrf" in cookies
    jar = "; ".join([login, *(f"{k}={v}" for k, v in cookies.items())])
    url = f"{base}disttrain/tensorboard/{job_id}/data/plugin/scalars/scalars_multirun"
    body = "tag=x&runs=[]"
    headers = {"Cookie": jar, "X-XSRF-TOKEN": cookies["XSRF-TOKEN"]}
    ok = await AsyncHTTPClient().fetch(HTTPRequest(url, method="POST", body=body, headers=headers))
    assert ok.code == 200
    forged = HTTPRequest(url, method="POST", body=body, headers={"Cookie": jar, "X-XSRF-TOKEN": "forged"})
    assert await raw_status(forged) == 403


async def test_tensorboards_frame_posts_without_a_token_and_other_sites_are_refused(
    jp_serverapp: Any, jp_fetch: Any, jp_http_port: int, jp_base_url: str, job_root: Any
) -> None:
    # TensorBoard's HParams dashboard posts with the login cookie and no XSRF token at all: the
    # browser's Sec-Fetch-Site (or, from an older browser, an Origin naming this host) says the
    # request comes from this origin. A request another site's page makes says otherwise.
    from .test_tensorboard import make_job

    job_id = make_job(job_root, "hparams")
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(JobStore(job_root).tensorboard_dir(job_id))) as writer:
        writer.add_hparams({"lr": 0.1}, {"hparam/loss": 0.5}, run_name="lr-0.1")
    base, login = await cookie_login(jp_serverapp, jp_http_port, jp_base_url)
    url = f"{base}disttrain/tensorboard/{job_id}/data/plugin/hparams/experiment"
    body = '{"experimentName": ""}'
    here = f"http://127.0.0.1:{jp_http_port}"

    def post(**headers: str) -> HTTPRequest:
        sent = {"Cookie": login, "Content-Type": "application/json", **headers}  # as the dashboard's
        return HTTPRequest(url, method="POST", body=body, headers=sent, request_timeout=60)

    same_origin = {"Sec-Fetch-Site": "same-origin", "Origin": here}

    async def dashboard() -> bool:  # the run's hparams, once TensorBoard has read them
        return await raw_status(post(**same_origin)) == 200

    await poll(dashboard, "the HParams dashboard's data")
    answer = await AsyncHTTPClient().fetch(post(**same_origin))
    assert "lr" in answer.body.decode()
    assert await raw_status(post(Origin=here)) == 200  # a browser without Sec-Fetch-Site
    refused = [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # another host of the site is another origin
        {"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"},
        {"Origin": "http://evil.example"},
        {"Sec-Fetch-Site": "same-origin", "Origin": "http://evil.example"},  # Jupyter's Origin rule
        {},  # no browser's word at all: the XSRF token is needed
    ]
    for headers in refused:
        assert await raw_status(post(**headers)) in (403, 404), headers  # 404: Jupyter's Origin rule
