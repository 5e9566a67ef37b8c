"""Backends declare their options in ``Backend.options``; the flags come from every registered one.

A third-party backend, registered through an entry point of a real (tiny) installed
distribution, gets its option as a flag of ``%%distrun`` and of ``jupyter disttrain run``, and
the value reaches its ``spec.options``; the built-ins' options load without their backends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jupyter_disttrain.backends import ENTRY_POINT_GROUP, backend_class, option_classes, options_class

SITE_BACKEND = """
from dataclasses import dataclass, field
from typing import Any

from jupyter_disttrain.backends.base import Backend
from jupyter_disttrain.model.flags import option
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import DryRun


@dataclass(frozen=True)
class SiteOptions:
    # Slurm's flag too: declared once, its value reaches whichever backend the job names.
    partition: str | None = option(metavar="NAME", help="the site scheduler's partition to queue on")
    pool: str | None = option(metavar="NAME", help="the site scheduler's pool of machines")


@dataclass(frozen=True)
class SiteRequest:
    options: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"

    def to_json(self) -> dict[str, Any]:
        return {"options": self.options, "device": self.device}


class SiteBackend(Backend):
    name = "site"
    options = SiteOptions

    # The base backend resolved spec.options into a SiteOptions once: each hook gets that object.
    def _validate(self, spec, opts):
        if opts.pool == "closed":
            raise InvalidSpecError("--pool closed takes no jobs: pick another pool")

    def _dryrun(self, spec, job_id, payload, opts):
        request = SiteRequest({"partition": opts.partition, "pool": opts.pool})
        text = f"queue {job_id} on partition {opts.partition}"
        return DryRun(job_id, str(self.store.job_dir(job_id)), self.name, request, text)

    def _schedule(self, record, opts):
        raise NotImplementedError

    def _cancel_existing(self, record):
        raise NotImplementedError
"""


@pytest.fixture
def site_path(tmp_path: Path) -> Path:
    """A directory holding an installed distribution whose entry point registers ``site``."""
    where = tmp_path / "site-packages"
    where.mkdir()
    (where / "site_backend.py").write_text(SITE_BACKEND)
    dist = where / "site_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: site-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nsite = site_backend:SiteBackend\n")
    return where


def _python(code: str, site: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_builtin_options_are_the_backends_own_and_load_without_them() -> None:
    for name in ("local", "kubernetes", "slurm"):
        assert options_class(name) is backend_class(name).options is not None
    code = """
        import sys
        from jupyter_disttrain.backends import option_classes
        print([c.__name__ for c in option_classes()])
        print([m for m in sys.modules if m.endswith((".backend", ".client")) or m == "kubernetes"])
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == ["['LocalOptions', 'KubeOptions', 'SlurmOptions']", "[]"]


def test_a_third_party_backends_option_is_a_flag_of_the_magic(site_path: Path, tmp_path: Path) -> None:
    code = """
        from IPython.core.interactiveshell import InteractiveShell
        ip = InteractiveShell.instance()
        ip.run_line_magic("load_ext", "jupyter_disttrain")
        ip.run_cell_magic("distrun", "--backend site --partition gpu-a --gpus 2 --dry-run", "print('hi')\\n")
    """
    run = _python(code, site_path, tmp_path)
    assert run.returncode == 0, run.stderr
    assert "queue distrun-" in run.stdout and "on partition gpu-a" in run.stdout, run.stdout


def test_a_third_party_backends_option_is_a_flag_of_the_cli(site_path: Path, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    code = """
        import json
        from jupyter_disttrain.commands import run_subcommand
        from jupyter_disttrain.jobs.intake import spec_from_flags
        from jupyter_disttrain.commands import _parser

        words = ["run", "train.py", "--backend", "site", "--partition", "gpu-b"]
        print(json.dumps(spec_from_flags(_parser().parse_args(words), [], default_name="train").options))
        run_subcommand(["--root", "jobs", *words, "--dry-run"])
    """
    run = _python(code, site_path, tmp_path)
    assert run.returncode == 0, run.stderr
    options, *printed = run.stdout.splitlines()
    assert json.loads(options) == {"partition": "gpu-b"}  # the backend's spec.options
    assert any(line.startswith("queue train-") and line.endswith("on partition gpu-b") for line in printed)
    assert (
        "--partition NAME"
        in _python(
            "from jupyter_disttrain.cli import main; main(['run', '--help'])", site_path, tmp_path
        ).stdout
    )


def test_an_option_of_another_backend_names_it(site_path: Path, tmp_path: Path) -> None:
    # The base backend resolves every backend's options, a third party's too: what it does not
    # declare is refused naming who does, and its hooks get its own typed options.
    code = """
        from jupyter_disttrain import api
        from jupyter_disttrain.storage.store import JobStore
        for backend, options in [
            ("local", {"pool": "x"}),
            ("site", {"python": "/usr/bin/python3"}),
            ("site", {"pool": "closed"}),
            ("kubernetes", {"pool": "x"}),
        ]:
            try:
                api.dryrun("print(1)", store=JobStore("jobs"), backend=backend, options=options)
            except Exception as exc:
                print(exc)
    """
    run = _python(code, site_path, tmp_path)
    assert run.stdout.splitlines() == [
        "the local backend has no option 'pool'; it is a Site option: add --backend site",
        "the site backend has no option 'python'; it is a Local option: add --backend local",
        "--pool closed takes no jobs: pick another pool",
        "unknown Kubernetes option 'pool'; it is a Site option: add --backend site",
    ], run.stderr


def test_a_dry_run_parses_the_options_once(tmp_path: Path) -> None:
    from jupyter_disttrain.backends.local.backend import LocalBackend
    from jupyter_disttrain.backends.local.options import LocalOptions
    from jupyter_disttrain.model.specs import JobSpec
    from jupyter_disttrain.storage.store import JobStore

    class Counting(LocalBackend):
        parsed = 0

        def _parse_options(self, options: dict[str, object], other: str | None) -> LocalOptions:
            self.parsed += 1
            return super()._parse_options(options, other)

    backend = Counting(JobStore(tmp_path / "jobs"))
    spec = JobSpec(name="once", accelerator="cpu", options={"grace_period": 3})
    assert backend.dryrun(spec, script="print(1)\n").request.to_json()["grace_period"] == 3.0
    assert backend.parsed == 1


def test_a_broken_third_party_backend_leaves_the_flags_of_the_others(
    site_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (site_path / "site_backend.py").write_text("raise ImportError('half installed')\n")
    monkeypatch.syspath_prepend(str(site_path))
    assert [c.__name__ for c in option_classes()] == ["LocalOptions", "KubeOptions", "SlurmOptions"]


@pytest.mark.parametrize(
    ("options", "grace"), [({}, 10.0), ({"grace_period": 2}, 2.0), ({"grace_period": 0}, 0.0)]
)
def test_the_local_grace_period_is_what_was_asked(
    tmp_path: Path, options: dict[str, int], grace: float
) -> None:
    # 0 is a valid grace period (SIGKILL at once), not "the default".
    from jupyter_disttrain.backends.local.backend import LocalBackend
    from jupyter_disttrain.model.specs import JobSpec
    from jupyter_disttrain.storage.store import JobStore

    spec = JobSpec(name="g", accelerator="cpu", options=options)
    request = LocalBackend(JobStore(tmp_path / "jobs")).dryrun(spec, script="print(1)\n").request
    assert request.to_json()["grace_period"] == grace
