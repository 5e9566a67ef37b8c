"""The checkpoints API over a real 2-rank job that saved torch.save files and a DCP directory:
the list, downloads (a directory as a streamed tar), the load cell run for real, resume through
POST jobs/<id>/resume (the new job's ranks get DISTTRAIN_RESUME_FROM), resubmitting from the start
(POST jobs/<id>/resubmit), and bad input."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_disttrain.api import Job
from jupyter_disttrain.storage.store import JobStore

from .conftest import run_checkout_job

torch = pytest.importorskip("torch")

NET = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.layer = nn.Linear(width, 2)

    def forward(self, x):
        return self.layer(x)
"""

SCRIPT = (
    NET
    + """
import os
import torch.distributed.checkpoint as dcp

ckpts = os.environ["DISTTRAIN_CHECKPOINT_DIR"]
resumed = os.environ.get("DISTTRAIN_RESUME_FROM", "")
torch.manual_seed(0)
model = Net(3)
if os.environ["RANK"] == "0":
    with open(os.path.join(os.environ["DISTTRAIN_JOB_DIR"], "resumed.txt"), "w") as f:
        f.write(resumed)
    os.makedirs(ckpts, exist_ok=True)
    for step in (2, 4):
        torch.save({"model": model.state_dict(), "step": step}, os.path.join(ckpts, f"step_{step}.pt"))
    dcp.save({"model": model.state_dict()}, checkpoint_id=os.path.join(ckpts, "dcp", "step_6"))
"""
)


@pytest.fixture
def job_root(shared_root: Path) -> Path:
    return shared_root


@pytest.fixture(scope="module")
def ckpt_job(shared_root: Path) -> str:
    """The job, its checkpoints dated a minute back: written whole (none may still be growing)."""
    job_id = run_checkout_job(shared_root, SCRIPT, "saver")
    back = time.time() - 60
    for path in (JobStore(shared_root).job_dir(job_id) / "checkpoints").rglob("*"):
        os.utime(path, (back, back))
    return job_id


async def call(jp_fetch: Any, *parts: str, **kwargs: Any) -> Any:
    response = await jp_fetch("disttrain", "api", *parts, **kwargs)
    return response


async def listing_of(jp_fetch: Any, job_id: str) -> dict[str, Any]:
    listing: dict[str, Any] = json.loads((await call(jp_fetch, "jobs", job_id, "checkpoints")).body)
    assert all(c["complete"] for c in listing["checkpoints"])
    return listing


async def error_of(jp_fetch: Any, *parts: str, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as info:
        await call(jp_fetch, *parts, **kwargs)
    assert info.value.response is not None
    return info.value.code, json.loads(info.value.response.body)["message"]


async def test_list_download_and_load(
    jp_fetch: Any, ckpt_job: str, shared_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = await listing_of(jp_fetch, ckpt_job)
    rows = [(c["step"], c["kind"], c["step_source"]) for c in listing["checkpoints"]]
    assert rows == [(2, "torch", "name"), (4, "torch", "name"), (6, "dcp", "name")]
    job_dir = JobStore(shared_root).job_dir(ckpt_job)
    assert listing["dir"] == str(job_dir / "checkpoints")
    assert listing["usage"]["count"] == 3 and listing["usage"]["latest"] == listing["checkpoints"][-1]["id"]
    detail = json.loads((await call(jp_fetch, "jobs", ckpt_job)).body)
    assert detail["checkpoints"] == listing["usage"]
    torch_ckpt, dcp_ckpt = listing["checkpoints"][1], listing["checkpoints"][2]

    got = await call(jp_fetch, "jobs", ckpt_job, "checkpoints", torch_ckpt["id"], "download")
    assert got.body == Path(torch_ckpt["path"]).read_bytes()
    got = await call(jp_fetch, "jobs", ckpt_job, "checkpoints", dcp_ckpt["id"], "download")
    assert got.headers["Content-Type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(got.body)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    on_disk = {f"step_6/{p.name}": p.read_bytes() for p in Path(dcp_ckpt["path"]).iterdir()}
    assert files == on_disk and "step_6/.metadata" in files

    # The load cells, run for real with the class the notebook defined: the saved weights.
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    expected = torch.load(torch_ckpt["path"], weights_only=False)["model"]
    for ckpt in (torch_ckpt, dcp_ckpt):
        answer = json.loads((await call(jp_fetch, "jobs", ckpt_job, "checkpoints", ckpt["id"], "code")).body)
        assert answer["model_class"] == "Net" and "model = Net(3)" in answer["code"]
        namespace: dict[str, Any] = {}
        exec(NET, namespace)
        exec(answer["code"], namespace)
        loaded = namespace["model"].state_dict()
        assert all(torch.equal(loaded[k], expected[k]) for k in expected)
    assert "dcp_to_torch_save" in answer["note"]


async def test_resume_through_rest(jp_fetch: Any, ckpt_job: str, shared_root: Path) -> None:
    listing = await listing_of(jp_fetch, ckpt_job)
    step_4 = listing["checkpoints"][1]
    response = await call(
        jp_fetch, "jobs", ckpt_job, "resume", method="POST", body=json.dumps({"checkpoint": 4})
    )
    assert response.code == 201
    answer = json.loads(response.body)
    assert answer["checkpoint"]["id"] == step_4["id"]
    assert response.headers["Location"].endswith(f"/disttrain/api/jobs/{answer['id']}")
    store = JobStore(shared_root)
    status = Job(answer["id"], store).wait(timeout=300)
    assert status.phase.value == "Succeeded"
    resumed = store.read_record(answer["id"]).spec.resumed_from
    assert resumed is not None and (resumed.job, resumed.step, resumed.path) == (ckpt_job, 4, step_4["path"])
    assert (store.job_dir(answer["id"]) / "resumed.txt").read_text() == step_4["path"]
    detail = json.loads((await call(jp_fetch, "jobs", answer["id"])).body)
    assert detail["spec"]["resumed_from"]["checkpoint"] == step_4["id"]
    # The job it resumed from pins that checkpoint.
    again = json.loads((await call(jp_fetch, "jobs", ckpt_job, "checkpoints")).body)
    assert [c["step"] for c in again["checkpoints"] if c["pinned"]] == [4]


async def test_resubmit_through_rest(jp_fetch: Any, ckpt_job: str, shared_root: Path) -> None:
    response = await call(jp_fetch, "jobs", ckpt_job, "resubmit", method="POST", body="")
    assert response.code == 201
    answer = json.loads(response.body)
    assert answer["id"] != ckpt_job and answer["job"]["id"] == answer["id"]
    assert response.headers["Location"].endswith(f"/disttrain/api/jobs/{answer['id']}")
    store = JobStore(shared_root)
    assert Job(answer["id"], store).wait(timeout=300).phase.value == "Succeeded"
    assert store.read_script(answer["id"]) == store.read_script(ckpt_job)
    new = store.read_record(answer["id"])
    assert new.spec.name == store.read_record(ckpt_job).spec.name
    # from the start: no checkpoint, and its ranks got no DISTTRAIN_RESUME_FROM
    assert new.spec.resume is None and new.spec.resumed_from is None
    assert (store.job_dir(answer["id"]) / "resumed.txt").read_text() == ""


async def test_bad_resubmit_is_4xx_and_launches_nothing(
    jp_fetch: Any, ckpt_job: str, shared_root: Path
) -> None:
    before = JobStore(shared_root).ids()
    assert (await error_of(jp_fetch, "jobs", "nosuch-abcde", "resubmit", method="POST", body=""))[0] == 404
    body = json.dumps({"checkpoint": 4})
    code, message = await error_of(jp_fetch, "jobs", ckpt_job, "resubmit", method="POST", body=body)
    assert code == 400 and "send no body" in message
    assert JobStore(shared_root).ids() == before


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        ({"checkpoint": 5}, 400, "checkpoint: job {job} has no checkpoint at step 5: its steps are 2, 4, 6"),
        ({"checkpoint": "soon"}, 400, "checkpoint must be 'latest', a step"),
        ({"checkpoint": True}, 400, "checkpoint must be 'latest', a step"),
        ({"step": 4}, 400, '{"checkpoint": "latest" | STEP'),
    ],
)
async def test_bad_resume_is_400_and_launches_nothing(
    jp_fetch: Any, ckpt_job: str, shared_root: Path, body: Any, code: int, says: str
) -> None:
    before = JobStore(shared_root).ids()
    status, message = await error_of(
        jp_fetch, "jobs", ckpt_job, "resume", method="POST", body=json.dumps(body)
    )
    assert (status, "\n" in message) == (code, False)
    assert says.replace("{job}", ckpt_job) in message
    assert JobStore(shared_root).ids() == before


async def test_unknown_job_and_checkpoint_are_404(jp_fetch: Any, ckpt_job: str) -> None:
    assert (await error_of(jp_fetch, "jobs", "nosuch-abcde", "checkpoints"))[0] == 404
    body = json.dumps({"checkpoint": "latest"})
    assert (await error_of(jp_fetch, "jobs", "nosuch-abcde", "resume", method="POST", body=body))[0] == 404
    code, message = await error_of(jp_fetch, "jobs", ckpt_job, "checkpoints", "c0123456789ab", "download")
    assert code == 404 and "has no checkpoint 'c0123456789ab'" in message
    assert (await error_of(jp_fetch, "jobs", ckpt_job, "checkpoints", "c0123456789ab", "code"))[0] == 404


async def test_a_directory_larger_than_the_queue_streams_whole(jp_fetch: Any, shared_root: Path) -> None:
    """9 MiB of shards: more than the writer may hold queued (4 chunks of 1 MiB), sent whole."""
    from jupyter_disttrain.model.specs import JobSpec
    from jupyter_disttrain.runtime.contract import CHECKPOINTS_DIR
    from jupyter_disttrain.server.checkpoints import CHUNK, QUEUED
    from jupyter_disttrain.storage.store import JobRecord

    store = JobStore(shared_root)
    store.create(JobRecord(id="big-abcde", spec=JobSpec(name="big")), "print(1)\n")
    folder = store.job_dir("big-abcde") / CHECKPOINTS_DIR / "step_9"
    folder.mkdir(parents=True)
    shards = {f"__{i}_0.distcp": os.urandom(3 << 20) for i in range(3)}
    for name, data in {**shards, ".metadata": b"meta"}.items():
        (folder / name).write_bytes(data)
    assert sum(map(len, shards.values())) > QUEUED * CHUNK
    back = time.time() - 60
    for path in [folder, *folder.iterdir()]:
        os.utime(path, (back, back))
    (ckpt,) = (await listing_of(jp_fetch, "big-abcde"))["checkpoints"]
    got = await call(
        jp_fetch, "jobs", "big-abcde", "checkpoints", ckpt["id"], "download", request_timeout=120
    )
    with tarfile.open(fileobj=io.BytesIO(got.body)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert files == {f"step_9/{name}": data for name, data in {**shards, ".metadata": b"meta"}.items()}


async def test_a_fifo_in_a_directory_checkpoint_is_left_out_of_its_download(
    jp_fetch: Any, shared_root: Path
) -> None:
    """Another user's FIFO in a checkpoint dir: the download ends whole without it (it used to
    wait for a writer forever, holding a thread of the server's default pool)."""
    from jupyter_disttrain.model.specs import JobSpec
    from jupyter_disttrain.runtime.contract import CHECKPOINTS_DIR
    from jupyter_disttrain.storage.store import JobRecord

    store = JobStore(shared_root)
    store.create(JobRecord(id="fifo-abcde", spec=JobSpec(name="fifo")), "print(1)\n")
    folder = store.job_dir("fifo-abcde") / CHECKPOINTS_DIR / "step_3"
    folder.mkdir(parents=True)
    torch.save({"w": torch.ones(2)}, folder / "model.pt")
    (folder / "config.json").write_text("{}")
    os.mkfifo(folder / "zz_pipe")
    back = time.time() - 60
    for path in [folder, *folder.iterdir()]:
        os.utime(path, (back, back), follow_symlinks=False)
    (ckpt,) = (await listing_of(jp_fetch, "fifo-abcde"))["checkpoints"]
    assert (ckpt["kind"], ckpt["step"]) == ("files", 3)
    for _ in range(2):
        got = await call(
            jp_fetch, "jobs", "fifo-abcde", "checkpoints", ckpt["id"], "download", request_timeout=30
        )
        with tarfile.open(fileobj=io.BytesIO(got.body)) as tar:
            names = sorted(m.name for m in tar.getmembers())
        assert names == ["step_3", "step_3/config.json", "step_3/model.pt"]
    assert (await jp_fetch("api", "kernelspecs", request_timeout=30)).code == 200
