"""A job's hyper-parameters, captured at submit so its record keeps them even if the script never
calls ``em``: the keys the script reads of the notebook's dict named like hyper-parameters, and
the ``--name value`` arguments after ``--``. A value whose key looks like a credential
(``password``, ``secret``, ``token``, ``api_key``, ``db_pass``, ``*_key``...), at any depth, is
never recorded: its key is kept, its value masked; so is a URL's password
(``runtime/secrets.py``, the one rule ``em.create_run(hparams=...)`` follows too).

They are kept in the job's spec (``JobSpec.hparams``, in ``job.json``; ``specs.check_hparams``
bounds them) and handed to every rank as JSON in ``$DISTTRAIN_HPARAMS``, where
``em.create_run`` without ``hparams=`` takes them.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..model.specs import HPARAMS_MAX_BYTES as MAX_JSON_BYTES
from ..model.specs import HPARAMS_MAX_KEYS as MAX_KEYS
from ..runtime.secrets import MASKED, as_mapping, looks_like_credential, mask_repr, mask_text, masked

# Names a notebook gives its hyper-parameters; when the cell uses several, the first one listed
# wins for a key both have.
HPARAM_NAMES = ("hparams", "hyperparams", "hyper_params", "config", "cfg", "params", "args")
_TEXT = 200  # a value shown as text (a list, an object) is cut to this many characters

Scalar = bool | int | float | str | None


def masked_keys(values: Mapping[str, Scalar]) -> list[str]:
    """The keys of ``values`` whose value was masked (whole, or a part of it: a URL's password)."""
    return [k for k, v in values.items() if isinstance(v, str) and MASKED in v]


def _scalar(value: Any) -> Scalar:
    if value is None or isinstance(value, bool | int | str):
        return value if not isinstance(value, str) else mask_text(value)[:_TEXT]
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "item") and getattr(value, "size", 2) == 1:  # a NumPy scalar, a 1-element tensor
        try:
            return _scalar(value.item())
        except (TypeError, ValueError, RuntimeError):
            pass
    # Deeper than flattened (or not a mapping): its text, credentials masked at every depth.
    return mask_repr(repr(masked(value)))[:_TEXT]


def flatten(
    values: Mapping[Any, Any], prefix: str = "", depth: int = 0, keep: Callable[[str], bool] | None = None
) -> dict[str, Scalar]:
    """Name to scalar; a nested dict's keys become ``outer.inner`` (two levels), anything else text.
    ``keep``: which names (and the dicts above them) to take; all by default. A credential-named
    key's value is masked whole, at any level."""
    out: dict[str, Scalar] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if keep is not None and not keep(name):
            continue
        if looks_like_credential(str(key)):
            out[name] = MASKED
            continue
        inner = as_mapping(value) if depth < 2 else None
        if inner is not None:
            out.update(flatten(inner, f"{name}.", depth + 1, keep))
        else:
            out[name] = _scalar(value)
        if len(out) >= MAX_KEYS:
            break
    return dict(list(out.items())[:MAX_KEYS])


def from_namespace(
    names: Iterable[str], namespace: Mapping[str, Any], read: Callable[[str, str], bool] | None = None
) -> dict[str, Scalar]:
    """The hyper-parameters among ``names`` (the ones a cell uses): each of ``HPARAM_NAMES`` whose
    value in ``namespace`` is a dict, an argparse or simple namespace, or a dataclass instance;
    of each, the keys that ``read(name, key)`` says the script reads (all by default)."""
    used = set(names)
    out: dict[str, Scalar] = {}
    for name in reversed(HPARAM_NAMES):  # reversed: the first name's keys are written last, and win
        mapping = as_mapping(namespace.get(name)) if name in used else None
        if mapping is not None:
            out.update(flatten(mapping, keep=None if read is None else functools.partial(read, name)))
    return fit(out)


def _parse(text: str) -> Scalar:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text[:_TEXT])


def from_args(args: Sequence[str]) -> dict[str, Scalar]:
    """``--lr 0.1 --epochs=3 --amp`` as ``{"lr": 0.1, "epochs": 3, "amp": True}``: what an
    argparse parser of the script most likely reads (positional arguments are not named, so
    they are left out). Dashes in names become underscores, as argparse does."""
    out: dict[str, Scalar] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("--") or arg == "--" or len(arg) == 2:
            continue
        name, eq, value = arg[2:].partition("=")
        if not eq:
            following = args[i] if i < len(args) else None
            if following is None or (following.startswith("-") and not _is_number(following)):
                out[name.replace("-", "_")] = True
                continue
            value, i = following, i + 1
        out[name.replace("-", "_")] = _parse(value)
    return fit(out)


def _is_number(text: str) -> bool:
    return isinstance(_parse(text), int | float)


def fit(values: Mapping[str, Scalar]) -> dict[str, Scalar]:
    """The first keys of ``values`` that fit ``MAX_KEYS`` and ``MAX_JSON_BYTES``, credentials'
    values masked (every way hyper-parameters are captured ends here)."""
    out: dict[str, Scalar] = {}
    size = 0
    for key, given in list(values.items())[:MAX_KEYS]:
        value = (
            MASKED if looks_like_credential(key) else mask_text(given) if isinstance(given, str) else given
        )
        item = len(json.dumps({key: value}))  # the braces pay for the ", " between items
        if size + item > MAX_JSON_BYTES:
            break
        out[key] = value
        size += item
    return out


def merged(*sources: Mapping[str, Scalar]) -> dict[str, Scalar]:
    """Later sources win (the script's arguments over the notebook's dict)."""
    out: dict[str, Scalar] = {}
    for source in sources:
        out.update(source)
    return fit(out)
