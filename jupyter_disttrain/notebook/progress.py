"""Progress in the cell's widget: a bar with step/total and ETA, and a sparkline of the run's
first metric (its loss, most often), fed by the job layer no more than once a second.

The bar comes from ``Job.progress`` (em's total, else the tqdm or Rich bar in the rank-0 log,
with Lightning's epochs); the sparkline from the last value of the first metric of the job's
first run, one point per new step the widget sees.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..model.errors import DistTrainError
from ..model.progress import Progress, progress_text
from ..model.specs import JobStatus
from ..payloads.runs import RunSummary

POLL_SECONDS = 1.0  # a bar redrawn more often would not be read; each read opens a log
SPARK_POINTS = 200  # kept for the sparkline (older ones are dropped)
SPARK_WIDTH, SPARK_HEIGHT = 140, 28
PROGRESS_CLASS = "jp-DistTrain-progress"  # the browser tests and the lab's styles find it by this


def progress_html(p: Progress | None) -> str:
    """A bar (when the total is known) and its words; nothing without progress."""
    if p is None:
        return ""
    words = f"<span>{html.escape(progress_text(p))}</span>"
    bar = ""
    if p.total:
        pct = max(0.0, min(100.0, 100.0 * p.step / p.total))
        bar = (
            '<div style="width:160px;height:8px;border-radius:4px;overflow:hidden;'
            'background:var(--jp-layout-color3,#ddd)">'
            f'<div style="width:{pct:.1f}%;height:100%;background:var(--jp-brand-color1,#1976d2)"></div>'
            "</div>"
        )
    return (
        f'<div class="{PROGRESS_CLASS}" title="from {html.escape(p.source)}" '
        f'style="display:flex;gap:8px;align-items:center">{bar}{words}</div>'
    )


def sparkline_svg(name: str, values: list[float]) -> str:
    """An inline SVG line of ``values`` with the metric's name and last value beside it."""
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 2:
        return ""
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    step = SPARK_WIDTH / (len(finite) - 1)
    points = " ".join(
        f"{i * step:.1f},{SPARK_HEIGHT - 2 - (v - low) / span * (SPARK_HEIGHT - 4):.1f}"
        for i, v in enumerate(finite)
    )
    return (
        '<span class="jp-DistTrain-sparkline" style="display:inline-flex;gap:6px;align-items:center">'
        f'<svg width="{SPARK_WIDTH}" height="{SPARK_HEIGHT}" role="img" aria-label="{html.escape(name)}">'
        f'<polyline points="{points}" fill="none" stroke="var(--jp-brand-color1,#1976d2)" '
        'stroke-width="1.5"/></svg>'
        f"<span>{html.escape(name)} {finite[-1]:.4g}</span></span>"
    )


def first_metric(runs: list[RunSummary]) -> tuple[str, int | None, float] | None:
    """(name, step, value) of the first numeric metric of the first run that has one."""
    for run in runs:
        for name in sorted(run.metrics):
            value = run.metrics[name]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return name, run.step, float(value)
    return None


@dataclass
class ProgressFeed:
    """The bar and the sparkline's points, read through the job layer once a second at most.
    A read that fails ends the feed (the widget shows no bar rather than an error)."""

    progress: Callable[[JobStatus], Progress | None]
    runs: Callable[[JobStatus], list[RunSummary]]
    clock: Callable[[], float] = time.monotonic
    metric: str | None = None
    values: list[float] = field(default_factory=list)
    _next: float = 0.0
    _last_step: int | None = None
    stopped: str | None = None

    def poll(self, status: JobStatus) -> tuple[Progress | None, str] | None:
        """(progress, the widget's HTML for it) when a read is due, else None."""
        if self.stopped is not None or self.clock() < self._next:
            return None
        self._next = self.clock() + POLL_SECONDS
        try:
            found, runs = self.progress(status), self.runs(status)
        except (OSError, DistTrainError) as err:
            self.stopped = str(err)
            return None
        self._add(first_metric(runs))
        return found, self.html(found)

    def html(self, found: Progress | None) -> str:
        line = sparkline_svg(self.metric, self.values) if self.metric else ""
        return f'<div style="display:flex;gap:16px;align-items:center">{progress_html(found)}{line}</div>'

    def _add(self, metric: tuple[str, int | None, float] | None) -> None:
        if metric is None:
            return
        name, step, value = metric
        if self.metric not in (None, name) or (step is not None and step == self._last_step):
            return
        self.metric, self._last_step = name, step
        self.values = [*self.values, value][-SPARK_POINTS:]
