"""Bad input to the REST API gets a 4xx naming the field, never a 5xx, and launches nothing."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tornado.httpclient import HTTPClientError

from jupyter_disttrain.jobs.intake import SPEC_FIELDS

from .conftest import parse_sse, submit_job


@pytest.fixture
def job_root(shared_root: Path) -> Path:
    return shared_root


async def answer(jp_fetch: Any, *parts: str, **kwargs: Any) -> tuple[int, Any]:
    """``(status, parsed JSON body)`` of a request, whether it failed or not."""
    try:
        response = await jp_fetch("disttrain", "api", *parts, allow_nonstandard_methods=True, **kwargs)
    except HTTPClientError as exc:
        assert exc.response is not None
        return exc.code, json.loads(exc.response.body or b"null")
    return response.code, json.loads(response.body or b"null")


def submit_body(spec: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"script": "print(1)\n", "spec": spec, **extra})


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"env": {"A": 1}}, "spec.env"),
        ({"args": None}, "spec.args"),
        ({"args": ["ok", 3]}, "spec.args"),
        ({"entrypoint": 5}, "spec.entrypoint"),
        ({"backend": ["local"]}, "spec.backend"),
        ({"working_dir": 5}, "spec.working_dir"),
        ({"nodes": True}, "spec.nodes"),
        ({"volumes": [{"claim": 1}]}, "spec.volumes"),
        ({"options": {"grace_period": 301}}, "spec.options.grace_period"),
        ({"options": {"grace_period": -1}}, "spec.options.grace_period"),
        ({"options": {"grace_period": "5"}}, "spec.options.grace_period"),
    ],
)
async def test_wrongly_typed_spec_fields_are_400_naming_the_field(
    jp_fetch: Any, shared_root: Path, spec: dict[str, Any], field: str
) -> None:
    code, reply = await answer(jp_fetch, "jobs", method="POST", body=submit_body(spec))
    assert code == 400, reply
    assert reply["message"].startswith(field + " must be"), reply
    assert not any(shared_root.glob("*/job.json")) if shared_root.exists() else True


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"entrypoint": "train.py\n"}, "entrypoint"),
        ({"name": "mnist\n"}, "job name"),
        ({"env": {"SEED\n": "1"}}, "env"),
    ],
)
async def test_a_value_with_a_trailing_newline_is_refused(
    jp_fetch: Any, shared_root: Path, spec: dict[str, Any], field: str
) -> None:
    """``$`` matches before a final newline: a whole value is checked with ``fullmatch``."""
    code, reply = await answer(jp_fetch, "jobs", method="POST", body=submit_body(spec, dry_run=True))
    assert code == 400 and reply["message"].startswith(field), reply


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_grace_period_nan_and_infinity_are_refused(jp_fetch: Any, value: str) -> None:
    body = '{"script": "print(1)", "spec": {"options": {"grace_period": VALUE}}}'.replace("VALUE", value)
    code, reply = await answer(jp_fetch, "jobs", method="POST", body=body)
    assert code == 400 and "grace_period" in reply["message"], reply


async def test_a_dry_run_answers_the_request_and_creates_nothing(jp_fetch: Any, tmp_path: Path) -> None:
    spec = {"name": "dry", "accelerator": "cpu", "options": {"grace_period": 300}}
    code, reply = await answer(jp_fetch, "jobs", method="POST", body=submit_body(spec, dry_run=True))
    assert code == 200, reply
    assert reply["dry_run"]["backend"] == "local" and reply["dry_run"]["request"]["grace_period"] == 300
    assert not Path(reply["dry_run"]["job_dir"]).exists()


async def test_a_kubernetes_dry_run_without_a_cluster_or_flavor_is_400_naming_flavor(
    jp_fetch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is missing is in the request (found by the fuzzer below as a 502): with --flavor and
    --image the same dry run needs no cluster."""
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    spec: dict[str, Any] = {"name": "dry", "backend": "kubernetes"}
    code, reply = await answer(jp_fetch, "jobs", method="POST", body=submit_body(spec, dry_run=True))
    assert code == 400, reply
    assert reply["message"].startswith("no flavor: pass --flavor (job, pytorchjob, t9k)"), reply
    spec = {**spec, "image": "pytorch/pytorch:2", "options": {"flavor": "job"}}
    code, reply = await answer(jp_fetch, "jobs", method="POST", body=submit_body(spec, dry_run=True))
    assert code == 200 and reply["dry_run"]["request"]["flavor"] == "job", reply


# -- fuzzing the submit body -----------------------------------------------------------------
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
_FIELD_VALUES = {
    "name": st.sampled_from(["fuzz", "Bad_Name", "", "a" * 70]) | _JSON,
    "nodes": st.integers(-2, 3) | _JSON,
    "nproc_per_node": st.integers(-2, 3) | _JSON,
    "backend": st.sampled_from(["local", "kubernetes", "nope"]) | _JSON,
    "accelerator": st.sampled_from(["cpu", "gpu", "auto", "tpu"]) | _JSON,
    "env": st.dictionaries(st.sampled_from(["A", "1B", "", "PATH"]), st.text(max_size=4) | _JSON, max_size=2),
    "args": st.lists(st.text(max_size=4), max_size=2) | _JSON,
    "entrypoint": st.sampled_from(["train.py", "../x.py", ".hidden", "job.json"]) | _JSON,
    "working_dir": st.sampled_from(["/tmp", "/nonexistent", "rel"]) | _JSON,
    "options": st.fixed_dictionaries(
        {}, optional={"grace_period": _JSON | st.floats(), "namespace": st.text(max_size=4)}
    )
    | _JSON,
    "volumes": st.lists(
        st.fixed_dictionaries({"claim": st.text(max_size=4), "mount_path": st.text(max_size=6)}), max_size=2
    )
    | _JSON,
}
_OTHER_FIELDS = sorted(SPEC_FIELDS - set(_FIELD_VALUES))
_SPEC = st.fixed_dictionaries(
    {},
    optional={
        **_FIELD_VALUES,
        **{name: _JSON for name in _OTHER_FIELDS},
        "bogus": _JSON,
    },
)
_BODY = st.fixed_dictionaries(
    # dry_run is true or not a boolean at all: no example launches a job (asserted below).
    {
        "dry_run": st.just(True) | st.sampled_from([None, "yes", 1, []]),
        "script": st.just("print(1)\n") | st.text(max_size=20) | _JSON,
    },
    optional={"spec": _SPEC | _JSON, "extra": _JSON},
)


async def test_fuzzed_submit_bodies_never_answer_5xx(jp_fetch: Any, shared_root: Path) -> None:
    loop = asyncio.get_running_loop()
    seen: dict[int, int] = {}
    fives: list[tuple[int, str, Any]] = []

    def post(body: str) -> None:
        code, reply = asyncio.run_coroutine_threadsafe(
            answer(jp_fetch, "jobs", method="POST", body=body), loop
        ).result(timeout=60)
        seen[code] = seen.get(code, 0) + 1
        if code >= 500:
            fives.append((code, body, reply))

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(_BODY)
    def fuzz(body: dict[str, Any]) -> None:
        post(json.dumps(body))

    # Hypothesis drives a blocking function; the server runs on this loop, so fuzz in a thread.
    started = time.monotonic()
    await loop.run_in_executor(None, fuzz)
    print(f"fuzzed submit: {sum(seen.values())} bodies in {time.monotonic() - started:.1f} s, answers {seen}")
    assert not fives, fives[:3]
    assert seen.get(400, 0) > 50 and seen.get(200, 0) > 0, seen  # both refusals and dry runs were reached
    assert not (shared_root.exists() and any(shared_root.glob("*/job.json")))


def _not_json_text(body: bytes) -> bool:
    """Not JSON text, nor blank (a blank body is no body: a resubmit's)."""
    if not body.strip():
        return False
    try:
        json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return True
    return False


# Bytes that are not JSON text: any bytes, a JSON body with a byte that is never UTF-8 spliced in,
# and JSON in another encoding. None parses, so none can launch a job (a resubmit would).
_BINARY = (
    st.binary(min_size=1, max_size=64)
    | st.tuples(
        _BODY.map(json.dumps), st.integers(0, 40), st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])
    ).map(lambda t: t[0].encode()[: t[1]] + t[2] + t[0].encode()[t[1] :])
    | _BODY.map(lambda b: json.dumps(b, ensure_ascii=False).encode("utf-16"))
).filter(_not_json_text)


async def test_binary_bodies_are_400_naming_the_body_on_every_route_that_takes_one(
    jp_fetch: Any, finished_job: str, shared_root: Path
) -> None:
    """jupyter_server's own reader answered 500 to a body that is not UTF-8 (issue 34, item 8)."""
    loop = asyncio.get_running_loop()
    routes = [("jobs",), ("jobs", finished_job, "resume"), ("jobs", finished_job, "resubmit")]
    seen: dict[int, int] = {}
    wrong: list[tuple[tuple[str, ...], int, bytes, Any]] = []
    jobs = set(shared_root.glob("*/job.json"))

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.sampled_from(routes), _BINARY)
    def fuzz(route: tuple[str, ...], body: bytes) -> None:
        code, reply = asyncio.run_coroutine_threadsafe(
            answer(jp_fetch, *route, method="POST", body=body), loop
        ).result(timeout=60)
        seen[code] = seen.get(code, 0) + 1
        if code != 400 or not reply["message"].startswith("the request body must be a JSON object in UTF-8"):
            wrong.append((route, code, body, reply))

    await loop.run_in_executor(None, fuzz)
    print(f"fuzzed binary bodies: answers {seen}")
    assert not wrong, wrong[:3]
    assert set(shared_root.glob("*/job.json")) == jobs  # nothing launched
    code, reply = await answer(jp_fetch, "jobs", method="POST", body=b"\x80{}")
    assert reply["message"].endswith("byte 0 (0x80) is not UTF-8"), reply
    code, reply = await answer(jp_fetch, "jobs", method="POST", body="[" * 100_000)
    assert code == 400 and "not JSON" in reply["message"], reply
    # JSON text, but a string no UTF-8 script can hold (half a surrogate pair); a whole pair is text
    spec = {"name": "dry", "accelerator": "cpu"}
    for text, expected in (("\ud800", 400), ("\ud83d\ude00", 200)):  # escaped as such by json.dumps
        body = json.dumps({"script": f"print('{text}')\n", "spec": spec, "dry_run": True})
        code, reply = await answer(jp_fetch, "jobs", method="POST", body=body)
        assert code == expected and (code == 200 or "surrogate" in reply["message"]), reply


# -- log reads -------------------------------------------------------------------------------
async def test_limit_zero_is_400(jp_fetch: Any, finished_job: str) -> None:
    for limit in ("0", "-1", "10001"):
        code, reply = await answer(jp_fetch, "jobs", finished_job, "logs", params={"limit": limit})
        assert code == 400 and "limit" in reply["message"], (limit, reply)
    code, reply = await answer(jp_fetch, "jobs", finished_job, "logs", params={"limit": "1"})
    assert code == 200 and len(reply["lines"]) == 1


async def test_stream_of_an_ended_job_is_event_stream_with_the_real_end_offset(
    jp_fetch: Any, finished_job: str
) -> None:
    whole = (await answer(jp_fetch, "jobs", finished_job, "logs", params={"limit": "10000"}))[1]
    assert whole["done"] and whole["offset"]
    # Resuming at the very end: the end is the first and only event.
    response = await jp_fetch(
        "disttrain", "api", "jobs", finished_job, "logs", "stream", params={"offset": whole["offset"]}
    )
    assert response.headers["Content-Type"].startswith("text/event-stream")
    ((kind, event_id, data),) = parse_sse(response.body.decode())
    assert kind == "end" and data["phase"] == "Succeeded"
    assert data["offset"] == event_id == whole["offset"]
    # From the start: the end event carries the offset after the last line sent.
    events = parse_sse(
        (await jp_fetch("disttrain", "api", "jobs", finished_job, "logs", "stream")).body.decode()
    )
    assert events[-1][0] == "end" and events[-1][2]["offset"] == events[-2][2]["offset"]


@pytest.mark.parametrize(
    "offset", ["1\nevent: end\ndata: {}", "0\r\nid: x", "rank-0:0\nevent: lines", "a b", "x" * 9000]
)
async def test_an_offset_cannot_inject_events(jp_fetch: Any, finished_job: str, offset: str) -> None:
    for route in (("logs",), ("logs", "stream")):
        code, reply = await answer(jp_fetch, "jobs", finished_job, *route, params={"offset": offset})
        assert code == 400 and "offset" in reply["message"], (route, reply)


async def test_deleting_an_unknown_tensorboard_is_404(jp_fetch: Any, finished_job: str) -> None:
    code, reply = await answer(jp_fetch, "tensorboard", "no-such-job-abcde", method="DELETE")
    assert code == 404, reply
    code, _ = await answer(jp_fetch, "tensorboard", finished_job, method="DELETE")
    assert code == 204  # a known job whose TensorBoard is not running: nothing to stop


async def test_stream_of_a_job_that_printed_nothing_ends_with_a_string_offset(
    jp_fetch: Any, shared_root: Path
) -> None:
    job = submit_job(shared_root, world=1, script="pass\n", name="quiet")
    assert job.wait(timeout=120).phase.value == "Succeeded"
    query = {"replica": "rank-0"}
    response = await jp_fetch("disttrain", "api", "jobs", job.id, "logs", "stream", params=query)
    assert response.headers["Content-Type"].startswith("text/event-stream")
    ((kind, event_id, data),) = parse_sse(response.body.decode())
    assert kind == "end" and data == {"phase": "Succeeded", "offset": ""} and event_id is None
