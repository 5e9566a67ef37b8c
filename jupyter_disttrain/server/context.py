"""What the extension shares with its handlers (kept in ``web_app.settings[SETTINGS_KEY]``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
    # Cancels (and deletes of running jobs) wait out a grace period: never in ``executor``.
    cancel_executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(32, thread_name_prefix="disttrain-cancel")
    )
    log_poll_interval: float = 0.05
    log_batch_lines: int = 5000
    keepalive_interval: float = 15.0
