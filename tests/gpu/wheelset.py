"""Is a folder of wheels what the GPU machine needs? Read each wheel's metadata and say what is
wrong: a pinned requirement without its wheel, a stray wheel, two versions of one package, or a
requirement (``Requires-Dist``, markers read for CPython on Linux x86-64) that neither a wheel
of the folder nor the machine's image satisfies.

    python tests/gpu/wheelset.py DIR [--python-version 3.12] [--requirements tests/gpu/wheels.txt]
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

# What the GPU machine's image has (docs/gpu-check.md; the device notes' package list of its
# 'cuda' image), as far as the wheels below need it: their requirements on these are not carried.
ON_THE_MACHINE = frozenset(
    canonicalize_name(n)
    for n in (
        "torch",
        "numpy",
        "psutil",
        "nvidia-ml-py",
        "packaging",
        "pygments",
        "python-dateutil",
        "six",
        "pyyaml",
        "typing-extensions",
    )
)


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The ``Requires-Dist`` lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(zf.read(name).decode())
    return [Requirement(line) for line in message.get_all("Requires-Dist") or []]


def problems(folder: Path, python_version: str, pinned: list[Requirement]) -> list[str]:
    """Everything wrong with the wheels in ``folder`` for CPython ``python_version`` on Linux
    x86-64, against the ``pinned`` list; [] when the set is complete and closed."""
    env: dict[str, str] = {
        **{key: str(value) for key, value in default_environment().items()},
        "python_version": python_version,
        "python_full_version": f"{python_version}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "extra": "",
    }
    found: dict[str, list[Version]] = {}
    wheels: dict[str, Path] = {}
    for wheel in sorted(folder.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(wheel.name)
        found.setdefault(name, []).append(version)
        wheels[name] = wheel
    out = [
        f"{n}: {len(v)} versions ({', '.join(map(str, v))}): keep one" for n, v in found.items() if len(v) > 1
    ]
    wanted = {canonicalize_name(r.name): r for r in pinned}
    for pinned_name, pin in wanted.items():
        versions = found.get(pinned_name, [])
        if not versions:
            out.append(f"{pinned_name}: pinned ({pin}) but no wheel")
        elif not any(pin.specifier.contains(v, prereleases=True) for v in versions):
            out.append(f"{pinned_name}: pinned ({pin}), the wheel is {', '.join(map(str, versions))}")
    out += [f"{n}: a wheel that the list does not pin" for n in found if n not in wanted]
    for wheel_name, wheel in wheels.items():
        for req in wheel_requirements(wheel):
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            needed = canonicalize_name(req.name)
            if needed in ON_THE_MACHINE:
                continue
            versions = found.get(needed, [])
            if not any(req.specifier.contains(v, prereleases=True) for v in versions):
                have = ", ".join(map(str, versions)) or "no wheel"
                out.append(f"{wheel_name} needs {req} ({have})")
    return out


def read_pins(path: Path) -> list[Requirement]:
    lines = (ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines())
    return [Requirement(ln) for ln in lines if ln]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--python-version", default="3.12")
    ap.add_argument("--requirements", type=Path, default=Path(__file__).with_name("wheels.txt"))
    args = ap.parse_args(argv)
    wrong = problems(args.folder, args.python_version, read_pins(args.requirements))
    size = sum(w.stat().st_size for w in args.folder.glob("*.whl"))
    count = len(list(args.folder.glob("*.whl")))
    for line in wrong:
        print(f"!! {line}", file=sys.stderr)
    print(
        f"{count} wheels, {size / 2**20:.1f} MiB in {args.folder}: " + ("NOT closed" if wrong else "closed")
    )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
