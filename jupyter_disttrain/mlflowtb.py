"""The name the Kubernetes pod wrapper imports the MLflow follower by, from the image's own
``jupyter_disttrain`` (``backends/kubernetes/podscript.py``): images of earlier versions have it
here, so it stays. The follower itself is ``tracking/mlflowtb.py``.
"""

from __future__ import annotations

from .tracking.mlflowtb import MlflowTensorBoard, follow

__all__ = ["MlflowTensorBoard", "follow"]
