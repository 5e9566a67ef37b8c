"""``--out``: what a rank writes (runtime/outvalues.py) and what the kernel reads back
(jobs/values.py), without a job: the rank's writer runs here on a namespace, as the rank wrapper
runs it on the script's globals. Real jobs: tests/test_kernel_values.py, the Slurm and toy
cluster tests."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from jupyter_disttrain.jobs import values as jobvalues
from jupyter_disttrain.jobs.intake import job_flag_classes, spec_from_flags
from jupyter_disttrain.model.errors import DistTrainError, InvalidSpecError
from jupyter_disttrain.model.flags import parse_size
from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus
from jupyter_disttrain.packaging.loadcell import definitions, rebuild_call
from jupyter_disttrain.packaging.outnames import check_out
from jupyter_disttrain.runtime import outvalues
from jupyter_disttrain.storage.store import JobRecord, JobStore


class Net(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(3, width)


SCRIPT = """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(3, width)

model = Net(4)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
losses = []
"""


def _job(tmp_path: Path, script: str = SCRIPT, **fields: object) -> tuple[JobStore, JobRecord]:
    store = JobStore(tmp_path / "jobs")
    record = JobRecord(id="vals-abcde", spec=JobSpec(**fields))  # type: ignore[arg-type]
    store.create(record, script)
    return store, record


def _asked(spec: JobSpec) -> dict[str, object]:
    return {"rank0": spec.out, "all": spec.out_all, "limit": spec.out_limit}


def _succeeded() -> JobStatus:
    return JobStatus("vals-abcde", JobPhase.SUCCEEDED)


def test_values_come_back_as_they_were_and_modules_as_the_notebooks_classes(tmp_path: Path) -> None:
    store, record = _job(tmp_path, out=["model", "opt", "data", "view"])
    model = Net(4)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    model.fc.weight.grad = torch.ones_like(model.fc.weight)
    model.fc.bias.grad = torch.ones_like(model.fc.bias)
    opt.step()  # momentum buffers in the state
    data = {
        "losses": [0.5, 0.25],
        "arr": np.arange(6, dtype=np.float32).reshape(2, 3)[:, 1],  # a strided view
        "scalar": np.float64(2.5),
        "nested": (1, {"b": b"x", "s": {1, 2}}),
        "t": torch.arange(4.0, requires_grad=True),
    }
    big = torch.arange(1000.0)
    namespace = {"model": model, "opt": opt, "data": data, "view": big[:3]}
    outvalues.write(namespace, 0, str(store.job_dir(record.id)), _asked(record.spec))

    # The view of a 1000-element storage is saved alone (torch.save would write all of it).
    assert (store.job_dir(record.id) / "out" / "rank-0" / "view.pt").stat().st_size < 2000
    kernel = {"Net": Net}  # the notebook's own class
    values = jobvalues.load(store, record, _succeeded(), kernel)
    assert values.notes == []
    assert type(values["model"]) is Net
    assert all(torch.equal(values["model"].state_dict()[k], v) for k, v in model.state_dict().items())
    assert type(values["opt"]) is torch.optim.SGD and values["opt"].param_groups[0]["lr"] == 0.5
    assert torch.equal(values["opt"].state_dict()["state"][0]["momentum_buffer"], torch.ones(4, 3))
    got = values["data"]
    assert got["losses"] == [0.5, 0.25] and got["nested"] == (1, {"b": b"x", "s": {1, 2}})
    assert isinstance(got["arr"], np.ndarray) and got["arr"].tolist() == [1.0, 4.0]
    assert type(got["scalar"]) is np.float64 and got["scalar"] == 2.5
    assert torch.equal(got["t"], torch.arange(4.0)) and not got["t"].requires_grad
    assert values["view"].tolist() == [0.0, 1.0, 2.0]
    # A second load gives the same objects again (the files are written once).
    again = jobvalues.load(store, record, _succeeded(), kernel)
    assert again["data"]["losses"] == got["losses"] and torch.equal(again["view"], values["view"])
    kept = {v.name: (v.kind, v.type) for v in jobvalues.kept(store, record)}
    assert kept == {
        "model": ("module", "Net"),
        "opt": ("optimizer", "SGD"),
        "data": ("value", "dict"),
        "view": ("value", "Tensor"),
    }


def test_a_class_the_cell_defined_is_defined_from_the_script(tmp_path: Path) -> None:
    """The kernel has no ``Net`` (the cell itself defined it): the script's definition, with its
    imports, makes it in a namespace of its own; the kernel's names are left alone."""
    store, record = _job(tmp_path, out=["model"])

    class Net(nn.Module):  # what the rank's __main__.Net was
        def __init__(self, width: int) -> None:
            super().__init__()
            self.fc = nn.Linear(3, width)

    Net.__module__, Net.__qualname__ = "__main__", "Net"
    model = Net(4)
    outvalues.write({"model": model}, 0, str(store.job_dir(record.id)), _asked(record.spec))
    kernel: dict[str, object] = {}
    values = jobvalues.load(store, record, _succeeded(), kernel)
    assert type(values["model"]).__name__ == "Net" and kernel == {}
    assert torch.equal(values["model"].fc.weight, model.fc.weight)


def test_what_cannot_come_back_is_named_with_why_and_the_rest_still_comes(tmp_path: Path) -> None:
    store, record = _job(tmp_path, out=["gen", "big", "small", "gone", "odd"], out_limit=64 * 1024)
    namespace = {
        "gen": {"k": (i for i in range(3))},
        "big": torch.zeros(1024 * 1024),
        "small": [1, 2],
        "odd": np.array(["a", "b"]),
    }
    outvalues.write(namespace, 0, str(store.job_dir(record.id)), _asked(record.spec))
    values = jobvalues.load(store, record, _succeeded(), {})
    assert values == {"small": [1, 2]}
    notes = "\n".join(values.notes)
    assert "gen did not come back: ['k']: a generator cannot come back" in notes
    assert "big did not come back: 4.0 MiB is over --out-limit (64.0 KiB per rank" in notes
    assert "gone did not come back: the cell did not assign it" in notes
    assert "odd did not come back: a numpy array of dtype <U1 cannot come back" in notes
    assert not (store.job_dir(record.id) / "out" / "rank-0" / "big.pt").exists()  # nothing left behind


def test_out_all_gives_a_list_by_rank_and_one_missing_rank_names_it(tmp_path: Path) -> None:
    store, record = _job(tmp_path, out_all=["rank"], nproc_per_node=3)
    for rank in (0, 2):
        outvalues.write({"rank": rank}, rank, str(store.job_dir(record.id)), _asked(record.spec))
    values = jobvalues.load(store, record, _succeeded(), {})
    assert "rank" not in values and values.notes == [
        "rank (rank 1) did not come back: rank 1 wrote no values (it did not run to the end of the cell "
        "under the rank wrapper)"
    ]
    outvalues.write({"rank": 1}, 1, str(store.job_dir(record.id)), _asked(record.spec))
    assert jobvalues.load(store, record, _succeeded(), {})["rank"] == [0, 1, 2]


def test_only_a_job_that_succeeded_gives_values(tmp_path: Path) -> None:
    store, record = _job(tmp_path, out=["small"])
    outvalues.write({"small": 1}, 0, str(store.job_dir(record.id)), _asked(record.spec))
    for phase in (JobPhase.FAILED, JobPhase.CANCELLED, JobPhase.RUNNING):
        with pytest.raises(DistTrainError, match=f"is {phase.value}: values come back only from a job that"):
            jobvalues.load(store, record, JobStatus(record.id, phase), {})
    _, plain = _job(tmp_path / "other")
    with pytest.raises(DistTrainError, match="kept no values: run it with --out NAMES"):
        jobvalues.load(store, plain, _succeeded(), {})


class Boom:
    """Runs code when unpickled: what a file that is not the rank wrapper's could hold."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch pwned",))


def test_the_kernel_reads_data_never_code_nor_a_link_nor_past_the_cap(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    store, record = _job(tmp_path, out=["a", "b", "c"], out_limit=4096)
    job_dir = store.job_dir(record.id)
    outvalues.write({"a": 1, "b": 2, "c": 3}, 0, str(job_dir), _asked(record.spec))
    folder = job_dir / "out" / "rank-0"
    torch.save({"value": Boom(), "arrays": []}, folder / "a.pt")  # code in a pickle: refused
    (folder / "b.pt").unlink()
    secret = tmp_path / "secret.pt"
    torch.save({"value": "secret", "arrays": []}, secret)
    (folder / "b.pt").symlink_to(secret)  # a link out of the job dir: never followed
    with open(folder / "c.pt", "ab") as f:
        f.write(b"\0" * 8192)  # grown past the cap after the rank wrote it
    values = jobvalues.load(store, record, _succeeded(), {})
    assert values == {} and not (tmp_path / "pwned").exists()
    notes = dict(note.split(" did not come back: ", 1) for note in values.notes)
    assert "UnpicklingError" in notes["a"], notes
    assert "Too many levels of symbolic links" in notes["b"], notes
    assert "over the job's --out-limit of 4.0 KiB" in notes["c"]


def test_the_manifest_is_the_commit_and_is_read_bounded(tmp_path: Path) -> None:
    store, record = _job(tmp_path, out=["x"])
    job_dir = store.job_dir(record.id)
    (job_dir / "out" / "rank-0").mkdir(parents=True)
    torch.save({"value": 1, "arrays": []}, job_dir / "out" / "rank-0" / "x.pt")  # no manifest yet
    assert jobvalues.kept(store, record) == []
    (job_dir / "out" / "rank-0.json").write_text(" " * (jobvalues.MANIFEST_BYTES + 1) + "{}")
    assert jobvalues.kept(store, record) == []
    manifest = {
        "rank": 0,
        "values": [
            {"name": "x", "kind": "value", "type": "int", "module": "builtins", "bytes": 9, "file": "x.pt"}
        ],
        "refused": [],
        "time": 0,
    }
    (job_dir / "out" / "rank-0.json").write_text(json.dumps(manifest))
    assert jobvalues.load(store, record, _succeeded(), {}) == {"x": 1}


def test_out_names_are_checked_against_the_script_before_launch() -> None:
    script = SCRIPT + (
        "import os\nf = open('x')\ng = (i for i in range(3))\nfn = lambda: 1\n"
        "for step in range(2):\n    last = step\nwith open('y') as fh:\n    pass\n"
        "if True:\n    deep = 1\nif (w := 3):\n    pass\ndef set_it():\n    global glob\n    glob = 1\n"
    )
    check_out(script, ["model", "opt", "losses", "last", "deep", "w", "glob", "step"], [])
    for name, said in [
        ("nope", "the cell never assigns nope"),
        ("f", "f is an open file, which cannot come back"),
        ("fh", "fh is an open file"),
        ("g", "g is a generator"),
        ("fn", "fn is a function"),
        ("Net", "Net is a class"),
        ("os", "os is a module"),
        ("set_it", "set_it is a function"),
    ]:
        with pytest.raises(InvalidSpecError, match=f"^--out-all {name}: {said}"):
            check_out(script, [], [name])


def test_flags_and_spec_of_out() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    from jupyter_disttrain.model.flags import add_flags

    add_flags(parser.add_argument, job_flag_classes())
    args = parser.parse_args(
        [
            "--out",
            "model,losses",
            "--out",
            "opt",
            "--out-all",
            "rank",
            "--out-limit",
            "2GiB",
            "--pdb",
            "--debug-timeout",
            "30",
        ]
    )
    spec = spec_from_flags(args, [], default_name="x")
    assert (spec.out, spec.out_all, spec.out_limit, spec.pdb, spec.debug_timeout) == (
        ["model", "losses", "opt"],
        ["rank"],
        2 * 1024**3,
        True,
        30,
    )
    assert [parse_size(t) for t in ("500MB", "2GiB", "512K", "4096", "1.5G")] == [
        500 * 1000**2,
        2 * 1024**3,
        512 * 1024,
        4096,
        int(1.5 * 1024**3),
    ]
    for bad in ("", "0", "-1", "12 parsecs", "1e9"):
        with pytest.raises(argparse.ArgumentTypeError, match="--out-limit takes a size"):
            parse_size(bad)
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", "a-b"])
    with pytest.raises(InvalidSpecError, match="x is in --out and --out-all"):
        JobSpec(out=["x"], out_all=["x"]).validate()
    with pytest.raises(InvalidSpecError, match="--out 'class' is not a variable name"):
        JobSpec(out=["class"]).validate()
    assert jobvalues.describe(spec) == [
        "back into the kernel from rank 0: model, losses, opt",
        "back into the kernel from every rank, each a list by rank: rank",
        "at most 2.0 GiB of them per rank (--out-limit), once the job succeeds",
    ]


def test_the_load_cell_and_the_rebuild_find_the_same_call() -> None:
    assert rebuild_call(SCRIPT, "Net") == "Net(4)"
    assert rebuild_call(SCRIPT, "SGD") == "torch.optim.SGD(model.parameters(), lr=0.5)"
    assert rebuild_call("m = Net(w)\nm = Net(3)\nm = Net(k)\n", "Net") == "Net(3)"  # literal preferred
    code = definitions(SCRIPT + "\n@decorate\ndef helper():\n    pass\nprint('work')\n", {"Net", "helper"})
    assert code.startswith("import torch\nfrom torch import nn\nclass Net(nn.Module):")
    assert "@decorate\ndef helper():" in code and "model = " not in code and "print" not in code


def test_pickle_of_a_refusal_reason_is_plain(tmp_path: Path) -> None:
    """The manifest is JSON: a refusal's reason is text, whatever the value was."""
    store, record = _job(tmp_path, out=["p"])
    outvalues.write({"p": pickle}, 0, str(store.job_dir(record.id)), _asked(record.spec))
    (refusal,) = json.loads((store.job_dir(record.id) / "out" / "rank-0.json").read_text())["refused"]
    assert refusal == {"name": "p", "why": f"a Python module cannot come back ({outvalues.CAN})"}
