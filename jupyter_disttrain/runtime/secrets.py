"""What looks like a credential, and how its value is kept out of a job's records.

One rule for every place that records values the user gave: the hyper-parameters captured at
submit (``tracking/hparams.py``: ``job.json``, ``$DISTTRAIN_HPARAMS``) and the ones given to
``em.create_run(hparams=...)`` (``run.json``, TensorBoard's event files). A key whose name looks
like a credential keeps its name and gets the value ``MASKED``, at every depth of nested dicts,
lists, dataclasses and namespaces; the password of a URL (``postgresql://user:PW@host``) is
masked in any text; an object shown by its ``repr`` has ``password='...'``-like parts masked.

Standard library only: ``em`` runs it inside the training processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
from collections.abc import Mapping
from typing import Any

MASKED = "<masked>"
# Words of a key that make it a credential wherever they are in it, or only as its last word
# (``max_tokens`` and ``keyframes`` are not credentials; ``hf_token``, ``db_pass`` are).
_ANYWHERE = frozenset(
    {
        *("password", "passwd", "passphrase", "pwd", "secret", "secrets", "credential", "credentials"),
        *("apikey", "auth", "authorization", "bearer", "cookie", "privatekey"),
    }
)
_LAST = frozenset({"token", "key", "pass", "pw"})
_MAX_DEPTH = 32  # of nested containers walked; deeper ones (a cycle) are masked whole
# scheme://user:password@host, scheme://:password@host (redis); a user alone before @ in an
# http(s) URL is a token (https://TOKEN@github.com/...).
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s/@]+@")
_URL_TOKEN = re.compile(r"(?P<head>\bhttps?://)[^\s:/@]+@", re.IGNORECASE)
# name=value, 'name': value, "name": value in an object's text (a repr).
_PAIR = re.compile(
    r"""(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)(?P<sep>['"]?\s*[=:]\s*)"""
    r"""(?P<value>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s,;)}\]]+)"""
)


def looks_like_credential(key: str) -> bool:
    """``password``, ``db.secret_name``, ``hf_token``, ``api_key``, ``awsSecretKey``, ``db_pass``,
    ``pwd``, ``auth_header``, ``*_key``... (of a dotted key, its last part)."""
    last = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(key).rsplit(".", 1)[-1]).lower()
    words = re.findall(r"[a-z0-9]+", last)
    return bool(words) and (words[-1] in _LAST or not _ANYWHERE.isdisjoint(words))


def mask_text(text: str) -> str:
    """``text`` with the passwords (and https tokens) of the URLs in it masked."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASKED}@", text)
    return _URL_TOKEN.sub(lambda m: f"{m['head']}{MASKED}@", text)


def mask_repr(text: str) -> str:
    """An object's text with URL passwords and the values of credential-named parts masked."""

    def pair(m: re.Match[str]) -> str:
        if not looks_like_credential(m["key"]):
            return m[0]
        return f"{m['key']}{m['sep']}{MASKED!r}"

    return _PAIR.sub(pair, mask_text(text))


def as_mapping(value: Any) -> Mapping[str, Any] | None:
    """A dict, a namespace's or a dataclass instance's fields by name; None for anything else."""
    if isinstance(value, Mapping):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, argparse.Namespace | types.SimpleNamespace):
        return vars(value)
    return None


def masked(value: Any, depth: int = 0) -> Any:
    """``value`` with every credential's value masked: a credential-named key of a mapping (or a
    dataclass's, a namespace's field) gets ``MASKED``, containers are walked (a dataclass or a
    namespace becomes a dict), text has URL passwords masked, and another object whose text shows
    a credential becomes its masked text."""
    if depth > _MAX_DEPTH:
        return MASKED
    if value is None or isinstance(value, bool | int | float | bytes):
        return value
    if isinstance(value, str):
        return mask_text(value)
    mapping = as_mapping(value)
    if mapping is not None:
        return {
            k: MASKED if looks_like_credential(str(k)) else masked(v, depth + 1) for k, v in mapping.items()
        }
    if type(value) in (list, tuple):
        return type(value)(masked(v, depth + 1) for v in value)
    if isinstance(value, list | tuple | set | frozenset):  # a named tuple, a set: as a list
        return [masked(v, depth + 1) for v in value]
    try:
        text = repr(value)
    except Exception:  # a broken __repr__: the object is kept as it is
        return value
    shown = mask_repr(text)
    return value if shown == text else shown
