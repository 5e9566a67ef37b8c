"""The extension's one route table (paths relative to the server's ``base_url``).

Each route carries an ``example`` path that matches it; the security test requests every
example with every verb its handler implements, without credentials, and expects 403, so a
route added here is checked without anyone writing a test for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tornado.web import RequestHandler

from . import checkpoints as c
from . import diagnosis as d
from . import handlers as h
from . import pools as p
from .debug import DebugHandler
from .proxy import TensorBoardProxyHandler

NAMESPACE = "disttrain"
_JOB = r"(?P<job_id>[^/]+)"
_TB = r"(?P<tb_id>[^/]+)"
_RUN = r"(?P<run>[^/]+)"
_CKPT = r"(?P<checkpoint>[^/]+)"


@dataclass(frozen=True)
class Route:
    pattern: str
    handler: type[RequestHandler]
    example: str


ROUTES: tuple[Route, ...] = (
    Route(r"disttrain/api/info", h.InfoHandler, "disttrain/api/info"),
    Route(r"disttrain/api/jobs/?", h.JobsHandler, "disttrain/api/jobs"),
    Route(rf"disttrain/api/jobs/{_JOB}/?", h.JobHandler, "disttrain/api/jobs/demo-abcde"),
    Route(rf"disttrain/api/jobs/{_JOB}/script", h.ScriptHandler, "disttrain/api/jobs/demo-abcde/script"),
    Route(rf"disttrain/api/jobs/{_JOB}/logs/?", h.LogsHandler, "disttrain/api/jobs/demo-abcde/logs"),
    Route(
        rf"disttrain/api/jobs/{_JOB}/logs/stream",
        h.LogStreamHandler,
        "disttrain/api/jobs/demo-abcde/logs/stream",
    ),
    Route(
        rf"disttrain/api/jobs/{_JOB}/resources",
        h.ResourcesHandler,
        "disttrain/api/jobs/demo-abcde/resources",
    ),
    Route(
        rf"disttrain/api/jobs/{_JOB}/replicas/(?P<replica>[^/]+)/stack",
        h.StackHandler,
        "disttrain/api/jobs/demo-abcde/replicas/rank-0/stack",
    ),
    Route(
        rf"disttrain/api/jobs/{_JOB}/debug/(?P<replica>[^/]+)",
        DebugHandler,
        "disttrain/api/jobs/demo-abcde/debug/rank-1",
    ),
    Route(rf"disttrain/api/jobs/{_JOB}/cancel", h.CancelHandler, "disttrain/api/jobs/demo-abcde/cancel"),
    Route(
        rf"disttrain/api/jobs/{_JOB}/diagnose", d.DiagnoseHandler, "disttrain/api/jobs/demo-abcde/diagnose"
    ),
    Route(
        rf"disttrain/api/jobs/{_JOB}/incidents/(?P<name>[^/]+)",
        d.IncidentHandler,
        "disttrain/api/jobs/demo-abcde/incidents/20260101T000000.000Z-manual",
    ),
    Route(
        rf"disttrain/api/jobs/{_JOB}/checkpoints/?",
        c.CheckpointsHandler,
        "disttrain/api/jobs/demo-abcde/checkpoints",
    ),
    Route(
        rf"disttrain/api/jobs/{_JOB}/checkpoints/{_CKPT}/download",
        c.CheckpointDownloadHandler,
        "disttrain/api/jobs/demo-abcde/checkpoints/c0123456789ab/download",
    ),
    Route(
        rf"disttrain/api/jobs/{_JOB}/checkpoints/{_CKPT}/code",
        c.CheckpointCodeHandler,
        "disttrain/api/jobs/demo-abcde/checkpoints/c0123456789ab/code",
    ),
    Route(rf"disttrain/api/jobs/{_JOB}/resume", c.ResumeHandler, "disttrain/api/jobs/demo-abcde/resume"),
    Route(
        rf"disttrain/api/jobs/{_JOB}/resubmit", c.ResubmitHandler, "disttrain/api/jobs/demo-abcde/resubmit"
    ),
    Route(r"disttrain/api/runs/?", h.RunsHandler, "disttrain/api/runs"),
    Route(r"disttrain/api/pools/?", p.PoolsHandler, "disttrain/api/pools"),
    Route(
        r"disttrain/api/pools/(?P<pool_id>[^/]+)",
        p.PoolHandler,
        "disttrain/api/pools/slurm-12-0123456789abcdef0123",
    ),
    Route(
        rf"disttrain/api/jobs/{_JOB}/runs/{_RUN}/?", h.RunHandler, "disttrain/api/jobs/demo-abcde/runs/mnist"
    ),
    Route(
        rf"disttrain/api/jobs/{_JOB}/runs/{_RUN}/artifacts/(?P<path>.+)",
        h.ArtifactHandler,
        "disttrain/api/jobs/demo-abcde/runs/mnist/artifacts/checkpoint/model.pt",
    ),
    Route(r"disttrain/api/tensorboard/?", h.TensorBoardListHandler, "disttrain/api/tensorboard"),
    Route(rf"disttrain/api/tensorboard/{_TB}/?", h.TensorBoardHandler, "disttrain/api/tensorboard/_all"),
    Route(
        rf"disttrain/api/tensorboard/{_TB}/reload",
        h.TensorBoardReloadHandler,
        "disttrain/api/tensorboard/_all/reload",
    ),
    Route(
        rf"disttrain/tensorboard/{_TB}(?P<path>/.*)?",
        TensorBoardProxyHandler,
        "disttrain/tensorboard/_all/data/plugins_listing",
    ),
)


def handlers() -> list[tuple[str, type[RequestHandler]]]:
    """``(pattern, handler)`` pairs for ``ExtensionApp.handlers`` (it prepends ``base_url``)."""
    return [(route.pattern, route.handler) for route in ROUTES]


def check_examples() -> None:
    """Raise if a route's example does not match its own pattern (kept honest by a test)."""
    for route in ROUTES:
        if not re.fullmatch(route.pattern, route.example):
            raise AssertionError(f"example {route.example!r} does not match {route.pattern!r}")
