"""Every pattern that validates a whole value refuses one with a trailing newline.

``re.match`` with a pattern ending in ``$`` accepts ``"train.py\\n"``: ``$`` matches before a
final newline. The validators use ``fullmatch`` (or ``\\Z``), which this checks value by value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from jupyter_disttrain.backends.kubernetes import manifests, options, planning, podmetrics
from jupyter_disttrain.backends.slurm import options as slurm_options
from jupyter_disttrain.backends.slurm.parse import SlurmOutputError, parse_time
from jupyter_disttrain.jobs import intake
from jupyter_disttrain.model import specs
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobSpec, Volume
from jupyter_disttrain.notebook import kernelenv


def _claim(claim: str) -> None:
    planning.check_spec(JobSpec(backend="kubernetes", volumes=[Volume(claim, "/data")]))


def _kube(**opts: Any) -> Callable[[], object]:
    return lambda: options.parse_options(opts)


REFUSED: dict[str, Callable[[], object]] = {
    "entrypoint": lambda: specs.validate_entrypoint("train.py\n"),
    "name": lambda: specs.validate_name("mnist\n"),
    "job id": lambda: specs.validate_job_id("mnist-k3x9q\n"),
    "env name": lambda: specs.validate_env_name("SEED\n"),
    "replica": lambda: intake.validate_replica("rank-0\n"),
    "quantity": lambda: options.parse_quantity("16Gi\n", "--memory"),
    "duration": lambda: options.parse_duration("15m\n", "--pending-timeout"),
    "namespace": _kube(namespace="team\n"),
    "service account": _kube(service_account="trainer\n"),
    "node selector key": _kube(node_selector={"gpu-type\n": "a100"}),
    "node selector value": _kube(node_selector={"gpu-type": "a100\n"}),
    "toleration": _kube(tolerations=["nvidia.com/gpu\n:NoSchedule"]),
    "claim": lambda: _claim("data\n"),
    "service name": lambda: manifests._check_names(JobSpec(name="a"), "mnist-k3x9q\n", "h"),
    "slurm partition": lambda: slurm_options.parse_options({"partition": "gpu\n"}),
    "slurm time": lambda: slurm_options.parse_options({"time": "1:00:00\n"}),
    "slurm mem": lambda: slurm_options.parse_options({"mem": "64G\n"}),
    "slurm constraint": lambda: slurm_options.parse_options({"constraint": "a100\n"}),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_a_trailing_newline_is_refused(what: str) -> None:
    with pytest.raises(InvalidSpecError):
        REFUSED[what]()


def test_the_same_values_without_it_pass() -> None:
    assert specs.validate_entrypoint("train.py") == "train.py"
    assert specs.validate_job_id("mnist-k3x9q") == "mnist-k3x9q"
    assert intake.validate_replica("rank-0") == "rank-0"
    assert options.parse_quantity("16Gi", "--memory") == 16 * 2**30
    assert options.parse_duration("15m", "--pending-timeout") == 900
    opts = options.parse_options({"namespace": "team", "node_selector": {"gpu-type": "a100"}})
    assert opts.namespace == "team"
    _claim("data")


def test_slurm_values_without_it_pass_and_its_durations_with_it_are_no_duration() -> None:
    opts = slurm_options.parse_options(
        {"partition": "gpu", "time": "1:00:00", "mem": "64G", "constraint": "a100"}
    )
    assert (opts.partition, opts.mem, opts.constraint) == ("gpu", "64G", "a100")
    assert parse_time("1:00:00") == 3600
    with pytest.raises(SlurmOutputError):
        parse_time("1:00:00\n1")


def test_a_kernel_variable_named_with_a_newline_is_not_passed_on() -> None:
    assert kernelenv._reserved("SEED\n") and not kernelenv._reserved("SEED")


def test_measured_quantities_with_a_newline_read_as_nothing() -> None:
    assert podmetrics.cpu_percent("250m\n") == 0.0 and podmetrics.cpu_percent("250m") == 25.0
    assert podmetrics.memory_bytes("2Ki\n") == 0 and podmetrics.memory_bytes("2Ki") == 2048
