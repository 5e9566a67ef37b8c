"""The stall and idle guard's judgement: is a running job stuck, or holding what it does not use?

*Stalled*: no progress for ``max(stall_factor x the median gap between progress, stall_floor)``
seconds (before any progress, ``stall_floor`` from the start). Progress is whatever moves forward:
an ``em`` metric or TensorBoard event written, the step of the tqdm bar in rank 0's log, the
collectives the ranks completed (their Flight Recorders' sequence numbers). A stalled job whose
processes still keep a CPU or GPU busy is *stalled, busy* (a busy loop, NCCL spinning in a hung
collective), else *stalled, idle*.

*Idle*: every running replica's utilisation (its GPUs' from NVML; its CPU, in % of one core,
where it has no GPU samples) averages under ``idle_below`` % over the last ``idle_window``
seconds, judged only once the window holds ``min_samples`` samples (a few samples say nothing).

What the guard then does is the job's ``guard`` action: ``notify`` (an event, the sidebar, a
notification), ``diagnose`` (also which rank is stuck, in which collective: an incident), ``cancel``
(also a graceful cancel: SIGTERM first, so ``em.on_preempt``'s checkpoint runs) or ``off``. The
settings are the job's flags, else this environment's ``DISTTRAIN_GUARD`` (the server's
``DistTrainApp.guard`` exports it to the kernels it starts), else the defaults below; the dry run
records the result. Who runs it: the launcher of a local or Slurm job (there with or without any
server), the Jupyter server for a Kubernetes job (docs/architecture.md "The guard").
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model.errors import InvalidSpecError
from ..model.flags import check_values, option
from ..payloads.monitoring import GuardState
from ..runtime import contract
from ..runtime.atomic import write_json

ACTIONS = ("notify", "diagnose", "cancel", "off")
GLOBAL_ENV = "DISTTRAIN_GUARD"  # "guard=cancel,stall_floor=300": the defaults of jobs submitted here
MIN_SAMPLES = 5  # at least this many samples in the idle window, and half the window's worth
_GAPS = 50  # the median step time is of this many last gaps between progress


def _action(value: object, field: str = "guard") -> str:
    if value not in ACTIONS:
        raise InvalidSpecError(f"{field} must be one of {', '.join(ACTIONS)}, not {value!r}")
    return str(value)


def _seconds(low: float, high: float) -> Any:
    def check(value: object, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise InvalidSpecError(f"{field} must be a number from {low:g} to {high:g}, not {value!r}")
        return float(value)

    return check


def _number(low: float, high: float, metavar: str, help: str) -> Any:
    """A flag of a number from ``low`` to ``high`` (None: not given)."""
    return option(check=_seconds(low, high), parse=float, metavar=metavar, help=help)


@dataclass(frozen=True)
class GuardOptions:
    """The guard's flags, declared once for every backend whose jobs are guarded. None: this
    environment's ``DISTTRAIN_GUARD``, else the default."""

    guard: str | None = option(
        check=_action,
        choices=ACTIONS,
        help="when the job stalls or idles: notify (an event, the sidebar, a notification), diagnose "
        "(also which rank is stuck, in which collective: an incident), cancel (also cancel it "
        "gracefully, em.on_preempt's checkpoint first) or off (default: $DISTTRAIN_GUARD's, else notify)",
    )
    stall_factor: float | None = _number(
        1,
        1000,
        "K",
        "stalled after K times the median time between progress (steps, the tqdm bar, "
        "collectives) without any (default 10)",
    )
    stall_floor: float | None = _number(
        0.5,
        7 * 86400,
        "SECONDS",
        "never stalled sooner than this without progress; before any "
        "progress, stalled after it (default 120)",
    )
    idle_below: float | None = _number(
        0,
        100,
        "PERCENT",
        "idle when GPU utilisation (CPU for a CPU job) stays under this over the idle window (default 5)",
    )
    idle_window: float | None = _number(
        1, 7 * 86400, "SECONDS", "the window the idle threshold is judged over (default 600)"
    )


@dataclass(frozen=True)
class GuardSettings:
    """A job's guard, resolved: what the launch request records."""

    action: str = "notify"
    stall_factor: float = 10.0
    stall_floor: float = 120.0
    idle_below: float = 5.0
    idle_window: float = 600.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> GuardSettings:
        """A request's guard; a job recorded before the guard existed is not guarded."""
        if not data:
            return cls(action="off")
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def describe(self) -> str:
        """One line for the dry run."""
        if self.action == "off":
            return "off"
        return (
            f"{self.action} when stalled (no progress for max({self.stall_factor:g} x the median step "
            f"time, {self.stall_floor:g} s)) or idle (under {self.idle_below:g} % for {self.idle_window:g} s)"
        )

    @property
    def tick(self) -> float:
        """Seconds between looks: often enough to flag a stall near its threshold."""
        return min(5.0, max(0.25, min(self.stall_floor, self.idle_window) / 8))


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """``DISTTRAIN_GUARD``'s values (``guard=cancel,stall_floor=300``), checked as the flags are."""
    text = env.get(GLOBAL_ENV, "").strip()
    values: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in {f.name for f in dataclasses.fields(GuardOptions)}:
            names = ", ".join(f.name for f in dataclasses.fields(GuardOptions))
            raise InvalidSpecError(f"{GLOBAL_ENV}: {item!r} is not NAME=VALUE with NAME one of {names}")
        try:
            values[key] = value.strip() if key == "guard" else float(value)
        except ValueError:
            raise InvalidSpecError(f"{GLOBAL_ENV}: {key} must be a number, not {value.strip()!r}") from None
    return check_values(GuardOptions, values, f"{GLOBAL_ENV}: ")


def resolve(options: Any, env: Mapping[str, str]) -> GuardSettings:
    """The job's flags over this environment's ``DISTTRAIN_GUARD`` over the defaults."""
    chosen = from_env(env)
    for f in dataclasses.fields(GuardOptions):
        value = getattr(options, f.name, None)
        if value is not None:
            chosen[f.name] = value
    if "guard" in chosen:
        chosen["action"] = chosen.pop("guard")
    return GuardSettings(**chosen)


# -- the judgements --------------------------------------------------------------------------------
class StallJudge:
    """When progress last moved, and how long it usually takes to."""

    def __init__(self, factor: float, floor: float, start: float) -> None:
        self.factor, self.floor = factor, floor
        self.changed = start
        self.value: Any = None
        self.gaps: deque[float] = deque(maxlen=_GAPS)

    def see(self, value: Any, now: float) -> bool:
        """Note the progress ``value`` seen at ``now``; True when it moved."""
        if value is None or value == self.value:
            return False
        if self.value is not None:
            self.gaps.append(now - self.changed)
        self.value, self.changed = value, now
        return True

    @property
    def threshold(self) -> float:
        usual = statistics.median(self.gaps) if len(self.gaps) >= 2 else 0.0
        return max(self.factor * usual, self.floor)

    def stalled(self, now: float) -> bool:
        return now - self.changed > self.threshold


class IdleJudge:
    """One replica's utilisation over the idle window."""

    def __init__(self, below: float, window: float, interval: float) -> None:
        self.below, self.window = below, window
        self.min_samples = max(MIN_SAMPLES, math.ceil(window / max(interval, 1e-3) / 2))
        self.samples: deque[tuple[float, float]] = deque()

    def add(self, t: float, utilisation: float) -> None:
        self.samples.append((t, utilisation))
        while self.samples and self.samples[0][0] < t - self.window:
            self.samples.popleft()

    @property
    def mean(self) -> float | None:
        return statistics.fmean(u for _, u in self.samples) if self.samples else None

    @property
    def idle(self) -> bool:
        mean = self.mean
        return len(self.samples) >= self.min_samples and mean is not None and mean < self.below


def utilisation(sample: Mapping[str, Any]) -> float:
    """A sample's utilisation: its GPUs' mean (NVML), else its CPU in % of one core."""
    gpus = sample.get("gpus")
    if isinstance(gpus, list) and gpus:
        return statistics.fmean(float(g.get("util_percent", 0.0)) for g in gpus if isinstance(g, dict))
    return float(sample.get("cpu_percent", 0.0))


class Guard:
    """One job's guard: fed progress and samples, it says when the job turns stalled or idle
    (once per episode; progress ends a stall, use ends idleness)."""

    def __init__(self, settings: GuardSettings, start: float, interval: float) -> None:
        self.settings = settings
        self.stall = StallJudge(settings.stall_factor, settings.stall_floor, start)
        self.interval = interval  # the resource samples'
        self.idle: dict[str, IdleJudge] = {}
        self.state: GuardState | None = None

    def see_progress(self, value: Any, now: float) -> None:
        if self.stall.see(value, now) and self.state is not None and self.state.state == "stalled":
            self.state = None  # it moved again

    def add_samples(self, replica: str, samples: Iterable[Mapping[str, Any]]) -> None:
        judge = self.idle.get(replica)
        if judge is None:
            s = self.settings
            judge = self.idle[replica] = IdleJudge(s.idle_below, s.idle_window, self.interval)
        for sample in samples:
            judge.add(float(sample["t"]), utilisation(sample))

    def forget(self, replicas: Iterable[str]) -> None:
        """Replicas that ended count no more."""
        for name in replicas:
            self.idle.pop(name, None)

    def busy(self) -> bool:
        """Whether some replica kept a CPU or GPU busy lately (its newest samples)."""
        recent = [u for j in self.idle.values() for _, u in list(j.samples)[-3:]]
        return bool(recent) and statistics.fmean(recent) >= self.settings.idle_below

    def judge(self, now: float) -> GuardState | None:
        """A new state when the job has just turned stalled or idle (None otherwise); a state
        that no longer holds is dropped."""
        s = self.settings
        if self.state is not None and self.state.state == "idle" and not self._all_idle():
            self.state = None
        if self.state is not None and self.state.state == "stalled":
            return None
        if self.stall.stalled(now):
            busy = self.busy()
            quiet = now - self.stall.changed
            how = "busy: its processes keep working" if busy else "idle: its processes do nothing"
            message = (
                f"stalled, {how}; no progress (steps, the tqdm bar, collectives) for {quiet:.0f} s "
                f"(threshold {self.stall.threshold:.0f} s)"
            )
            self.state = GuardState("stalled", now, message, busy, s.action, self.stall.threshold)
            return self.state
        if self.state is None and self._all_idle():
            means = ", ".join(
                f"{n} {j.mean:.0f} %" for n, j in sorted(self.idle.items()) if j.mean is not None
            )
            message = f"idle: utilisation under {s.idle_below:g} % for {s.idle_window:.0f} s ({means})"
            self.state = GuardState("idle", now, message, False, s.action, s.idle_window)
            return self.state
        return None

    def _all_idle(self) -> bool:
        return bool(self.idle) and all(j.idle for j in self.idle.values())


# -- the state file ----------------------------------------------------------------------------------
def write_state(job_dir: Path, state: GuardState | None) -> None:
    """``guard.json``: what the guard says now (``{}`` once the job is fine again)."""
    write_json(job_dir / contract.GUARD_FILE, dataclasses.asdict(state) if state else {})


def read_state(job_dir: Path) -> GuardState | None:
    """What the job's guard last said (None: nothing, or it could not be read)."""
    from ..storage.safefiles import open_regular

    try:
        with open_regular(job_dir / contract.GUARD_FILE) as f:
            data = json.loads(f.read(64 * 1024))
        return GuardState(**data) if data else None
    except (OSError, ValueError, TypeError):
        return None
