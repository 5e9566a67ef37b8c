"""What the REST API and the Python API answer, typed once, by area: a job's summary, details,
logs and the answers of what changes it (``jobs``), what watching a running job finds (its
resources, stacks, diagnoses, the guard's word, resource-hours: ``monitoring``), runs and
TensorBoard (``runs``), checkpoints and resume (``checkpoints``).

The server builds these and sends ``to_json(...)`` of them; ``labextension/rest/types.ts`` is
generated from them and the types of ``model/specs.py`` by ``scripts/gen_types.py`` (a test fails
when the checked-in file is stale), so the lab extension cannot drift from the server.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from ..model.specs import ABSENT_WHEN_NONE, to_plain


def absent() -> Any:
    """A field left out of the JSON when None (``ABSENT_WHEN_NONE``)."""
    return field(default=None, metadata={ABSENT_WHEN_NONE: True})


def to_json(payload: Any) -> dict[str, Any]:
    """A payload (a dataclass) as the plain JSON object the API sends."""
    plain: dict[str, Any] = to_plain(payload)
    return plain
