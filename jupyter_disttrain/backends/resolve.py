"""A job's ``spec.options`` turned into its backend's typed options: the one place they are parsed.

``Backend.resolve_options`` calls ``resolve`` once per request (a dry run, a submit) and once
per use of a stored record, and hands the typed object to every hook, as TorchX resolves a
scheduler's run options in its base class. An option the backend does not declare is refused in
one line that names the backend declaring it, found in the registry; ``declared`` is the parse
every backend gets unless it checks more (Slurm's names and sizes, Kubernetes' object names).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..model.errors import InvalidSpecError
from ..model.flags import check_values
from .registry import option_owner

T = TypeVar("T")


def names_of(cls: type | None) -> tuple[str, ...]:
    """The options an options dataclass declares, in their order (none without one)."""
    return tuple(f.name for f in dataclasses.fields(cls)) if cls is not None else ()


def resolve(
    backend: str,
    cls: type | None,
    options: Mapping[str, Any],
    parse: Callable[[dict[str, Any], str | None], T],
) -> T:
    """``options`` parsed by ``parse``, which also gets the backend that has the first option
    ``cls`` does not declare (looked up only then: the registry may load third parties)."""
    unknown = sorted(set(options) - set(names_of(cls)))
    return parse(dict(options), option_owner(unknown[0], backend) if unknown else None)


def declared(backend: str, cls: type | None, options: dict[str, Any], other: str | None) -> Any:
    """``options`` as dataclass ``cls`` declares them, each checked by its field's ``check``;
    any other name refused, naming ``other`` (the backend that has it) when there is one."""
    names = names_of(cls)
    unknown = sorted(set(options) - set(names))
    if unknown:
        where = f"it is a {other.capitalize()} option: add --backend {other}" if other else None
        listed = f"its options are: {', '.join(names)}" if names else "it takes none"
        raise InvalidSpecError(f"the {backend} backend has no option {unknown[0]!r}; {where or listed}")
    return None if cls is None else cls(**check_values(cls, options))
