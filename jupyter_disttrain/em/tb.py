"""A run's TensorBoard event file: scalars as ``<type>/<metric>`` and the HParams plugin's summaries.

``torch.utils.tensorboard`` writes it: every training process has torch already, so this adds no
dependency (tensorboardX would be one more package to install in every image). Only the
follower process (``follow.py``) imports it, never ``em`` itself.

``SummaryWriter.add_hparams`` would write the hparams into a new timestamped sub-directory, which
TensorBoard shows as a second run; the same three summaries go into the run's own file instead:
the session start (the hparams) when the run starts, so a running or crashed run shows in the
dashboard, and the experiment (with the final metric values) and session end at ``finish``.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _hparam(value: Any) -> int | float | str | bool:
    # The HParams plugin knows numbers, strings and booleans; anything else is shown as text.
    if isinstance(value, bool | str | int | float):
        return value
    return float(value) if isinstance(value, numbers.Real) else str(value)


class TensorBoard:
    def __init__(self, logdir: Path, hparams: Mapping[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._hparams = {str(k): _hparam(v) for k, v in hparams.items()}
        self._writer = SummaryWriter(log_dir=str(logdir))
        self._file = self._writer._get_file_writer()
        if self._hparams:
            self._file.add_summary(self._summaries({})[1])

    def _summaries(self, metrics: Mapping[str, float]) -> tuple[Any, Any, Any]:
        from torch.utils.tensorboard.summary import hparams

        return hparams(self._hparams, dict(metrics))

    def scalars(self, points: Iterable[tuple[str, float, int, float]]) -> None:
        """(tag, value, step, wall time) of each point."""
        for tag, value, step, when in points:
            self._writer.add_scalar(tag, value, step, walltime=when)

    def flush(self) -> None:
        self._writer.flush()

    def close(self, final: Mapping[str, float], *, finished: bool) -> None:
        """Write the experiment (each metric's last value) and, for a finished run, its end."""
        if self._hparams:
            experiment, _, end = self._summaries(final)
            self._file.add_summary(experiment)
            if finished:
                self._file.add_summary(end)
        self._writer.close()
