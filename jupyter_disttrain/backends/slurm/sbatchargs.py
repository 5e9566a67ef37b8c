"""One pass-through sbatch option read as sbatch reads it (``--sbatch-option``).

sbatch parses its options with ``getopt_long``: a long option may be written as any prefix of
its name that no other option shares (``--outp=x`` is ``--output=x``), and short options
cluster (``-sN9`` is ``-s -N 9``, ``-vo/x`` is ``-v -o /x``). ``read_option`` gives the option
sbatch will see, by its full name, so the backend can judge it: an ambiguous prefix, a cluster,
and an option that takes a value written without one (sbatch would take the next word as the
value: another option, or the batch script) are refused, each in one line.

The table is sbatch 22.05.8's, recorded from the real sbatch (``sbatch --a`` names every option
that starts with ``a``; ``sbatch --NAME`` says whether it requires a value). An option newer
than that passes only with its value attached (``--name=value``): no later word can become it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...model.errors import InvalidSpecError

VERSION = "22.05"  # of the sbatch the table was recorded from
REQUIRED = frozenset(
    {"account", "acctg-freq", "array", "batch", "bb", "bbf", "begin", "chdir", "cluster",
     "cluster-constraint", "clusters", "comment", "constraint", "container", "context", "core-spec",
     "cores-per-socket", "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot",
     "dependency", "distribution", "error", "exclude", "export", "export-file", "extra-node-info", "gid",
     "gpu-bind", "gpu-freq", "gpus", "gpus-per-node", "gpus-per-socket", "gpus-per-task", "gres",
     "gres-flags", "hint", "input", "job-name", "kill-on-invalid-dep", "licenses", "mail-type",
     "mail-user", "mcs-label", "mem", "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "network",
     "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node",
     "ntasks-per-socket", "ntasks-per-tres", "open-mode", "output", "partition", "power", "prefer",
     "priority", "profile", "qos", "reservation", "signal", "sockets-per-node", "switches",
     "tasks-per-node", "thread-spec", "threads-per-core", "time", "time-min", "tmp", "uid",
     "wait-all-nodes", "wckey", "wrap"}
)  # fmt: skip
NO_VALUE = frozenset(
    {"contiguous", "help", "hold", "ignore-pbs", "no-requeue", "overcommit", "oversubscribe", "parsable",
     "quiet", "reboot", "requeue", "spread-job", "test-only", "usage", "use-min-nodes", "verbose",
     "version", "wait"}
)  # fmt: skip
_OPTIONAL_VALUE = frozenset({"exclusive", "get-user-env", "nice", "no-kill", "propagate"})
_ALIASES = {"tasks-per-node": "ntasks-per-node", "cluster": "clusters"}  # two names, one option
OPTIONS = REQUIRED | NO_VALUE | _OPTIONAL_VALUE
# Short options: the long option each one is.
_SHORT = {
    "a": "array", "b": "begin", "c": "cpus-per-task", "d": "dependency", "e": "error", "i": "input",
    "m": "distribution", "n": "ntasks", "o": "output", "p": "partition", "q": "qos", "t": "time",
    "w": "nodelist", "x": "exclude", "A": "account", "B": "extra-node-info", "C": "constraint",
    "D": "chdir", "F": "nodefile", "G": "gpus", "J": "job-name", "L": "licenses", "M": "clusters",
    "N": "nodes", "S": "core-spec", "h": "help", "s": "oversubscribe", "v": "verbose", "H": "hold",
    "O": "overcommit", "Q": "quiet", "V": "version", "W": "wait", "k": "no-kill",
}  # fmt: skip
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class SbatchOption:
    """An option as sbatch reads it: its full long name (as given, for one newer than the table)
    and its value (None: none given)."""

    name: str
    value: str | None

    @property
    def text(self) -> str:
        """``--name=value`` (or ``--name``): the one form sbatch reads the same on the command line
        and in a ``#SBATCH`` line."""
        return f"--{self.name}" if self.value is None else f"--{self.name}={self.value}"


def _refuse(text: str, why: str) -> InvalidSpecError:
    return InvalidSpecError(f"--sbatch-option {text}: {why}")


def read_option(text: str) -> SbatchOption:
    """The option ``text`` is to sbatch, or a one-line refusal saying how to write it. Whether
    its value is as the option needs is ``check_value``'s (after the caller judged the name)."""
    if text.startswith("--"):
        name, eq, value = text[2:].partition("=")
        if not _NAME.fullmatch(name):
            raise _refuse(text, "give one sbatch option as one word, e.g. --sbatch-option=--mail-type=END")
        return SbatchOption(_resolve(text, name), value if eq else None)
    if len(text) >= 2 and text[0] == "-" and text[1].isalpha():
        return _short(text)
    raise _refuse(text, "give one sbatch option as one word, e.g. --sbatch-option=--mail-type=END")


def _resolve(text: str, name: str) -> str:
    """The full name of the long option sbatch takes ``--name`` for (a prefix of a known one)."""
    if name in OPTIONS:
        return _ALIASES.get(name, name)
    matches = sorted({_ALIASES.get(n, n) for n in OPTIONS if n.startswith(name)})
    if len(matches) > 1:
        raise _refuse(
            text,
            f"sbatch reads --{name} as any of --{', --'.join(matches[:6])}"
            f"{'...' if len(matches) > 6 else ''}: write the option's full name",
        )
    return matches[0] if matches else name


def check_value(text: str, option: SbatchOption) -> None:
    """Refuse an option without the value it needs (sbatch would take the next word for it) or
    with one it does not take."""
    name, value = option.name, option.value
    if name not in OPTIONS and value is None:
        raise _refuse(
            text,
            f"not an option of sbatch {VERSION}; if your cluster's sbatch has it, give it with its value "
            f"attached (--{name}=VALUE)",
        )
    if name in REQUIRED and value is None:
        raise _refuse(text, f"--{name} takes a value: write --{name}=VALUE in one word")
    if name in NO_VALUE and value is not None:
        raise _refuse(text, f"--{name} takes no value: write --{name}")


def _short(text: str) -> SbatchOption:
    letter, rest = text[1], text[2:]
    name = _SHORT.get(letter)
    if name is None:
        raise _refuse(text, f"-{letter} is not an option of sbatch {VERSION}")
    if name in NO_VALUE and rest:
        raise _refuse(
            text,
            f"sbatch reads it as several options (-{letter} then -{rest[0]}...): give each as its own "
            "--sbatch-option, by its full name",
        )
    return SbatchOption(name, rest or None)
