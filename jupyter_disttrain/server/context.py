"""What the extension shares with its handlers (kept in ``web_app.settings[SETTINGS_KEY]``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .jobs import JobService
    from .tensorboard import TensorBoardManager

SETTINGS_KEY = "jupyter_disttrain"


@dataclass
class ServerContext:
    """The extension's live objects, built once at load time by ``DistTrainApp``."""

    service: JobService
    executor: ThreadPoolExecutor
    tensorboard: TensorBoardManager
    log_poll_interval: float = 0.05
    log_batch_lines: int = 5000
    keepalive_interval: float = 15.0
