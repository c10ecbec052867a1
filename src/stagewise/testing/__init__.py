"""The lab contract as a public conformance suite (scikit-learn's ``check_estimator`` idea).

A lab written anywhere (in this package or outside it) is checked with::

    from stagewise.testing import check_lab
    report = check_lab(LAB)          # a Lab value (it need not be registered) or a registered name
    print(report)                    # one line per check: passed / failed: why / skipped: why

Each check is a plain function of :mod:`stagewise.testing.checks` (no pytest needed);
:data:`CHECKS` lists them in the order they run. ``preset`` and ``reproduce`` run once per
entry: their results are named ``preset[NAME]`` (``preset[(defaults)]`` for the lab's defaults) and
``reproduce[NAME]`` / ``reproduce[NAME --quick]``.

Skips carry a reason: ``Lab.conformance_skips`` maps a check name (a base name such as
``resume_equals_uninterrupted`` or one entry such as ``preset[smollm2]``) to why the lab
cannot pass it, and a check that raises :class:`~stagewise.errors.NotAvailable` (an
optional package is missing, the hub is offline) is skipped with that message. Checks of
the smoke run are skipped when the run itself did not finish.

With ``strict=True`` (the default) :func:`check_lab` raises :class:`ConformanceError`
listing every failure; with ``strict=False`` it only returns the :class:`ConformanceReport`.

One test per check (scikit-learn's ``parametrize_with_checks`` pattern): :func:`lab_checks`
yields :class:`LabCheck` values, one per (lab, check), for pytest to parametrize over, so
``pytest -k`` selects a single check; each runs in a :class:`Session` whose smoke run can come
from a cache of finished runs (``smoke_source``)::

    @pytest.mark.parametrize("check", lab_checks(LAB), ids=str)
    def test_conforms(check, tmp_path):
        result = check.run(Session(check.lab, tmp_path))
        if result.outcome == "skipped":
            pytest.skip(result.message)
        assert result.outcome == "passed", result.message
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import NotAvailable, UserError
from ..labs import Lab, RunSpec, get_lab
from ..labs import registry as _registry
from .checks import CHECKS, Session, Skip, check_entry, first_line

__all__ = ["CHECKS", "CheckResult", "ConformanceError", "ConformanceReport", "LabCheck", "Session", "check_lab", "check_names",
           "lab_checks"]

Outcome = Literal["passed", "failed", "skipped"]
DEFAULTS = "(defaults)"  # the entry name of the lab's defaults (no preset)


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome: ``passed``, ``failed`` (``message``: what is wrong) or
    ``skipped`` (``message``: the reason)."""

    name: str
    outcome: Outcome
    message: str = ""

    def __str__(self) -> str:
        return f"{self.name}: {self.outcome}" + (f": {self.message}" if self.message else "")


@dataclass(frozen=True)
class ConformanceReport:
    """Every check's :class:`CheckResult` for lab ``lab``, in the order they ran;
    ``report[name]`` is one result."""

    lab: str
    results: tuple[CheckResult, ...]

    def __getitem__(self, name: str) -> CheckResult:
        return {result.name: result for result in self.results}[name]  # KeyError for an unknown name

    def _with(self, outcome: str) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if r.outcome == outcome)

    @property
    def passed(self) -> tuple[CheckResult, ...]:
        return self._with("passed")

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return self._with("failed")

    @property
    def skipped(self) -> tuple[CheckResult, ...]:
        return self._with("skipped")

    @property
    def ok(self) -> bool:
        """True when no check failed (skipped checks do not count against a lab)."""
        return not self.failed

    def __str__(self) -> str:
        head = f"lab {self.lab}: {len(self.passed)} passed, {len(self.failed)} failed, {len(self.skipped)} skipped"
        return "\n".join([head, *(f"  {r}" for r in self.results)])


class ConformanceError(AssertionError):
    """Raised by a strict :func:`check_lab`: one line per failed check; ``report`` holds all."""

    def __init__(self, report: ConformanceReport):
        self.report = report
        super().__init__("\n".join([f"lab {report.lab} fails {len(report.failed)} conformance check(s):",
                                    *(f"  {r}" for r in report.failed)]))


def _entries(lab: Lab) -> list[tuple[str, str, RunSpec]]:
    """(base check, result name, spec) for every preset, the defaults and every reproduce entry."""
    out = [("preset", f"preset[{p or DEFAULTS}]", RunSpec(lab=lab.name, preset=p, name=str(p))) for p in [None, *lab.presets]]
    out += [("reproduce", f"reproduce[{s.name}]", s) for s in lab.reproduce.full]
    out += [("reproduce", f"reproduce[{s.name} --quick]", s) for s in lab.reproduce.quick]
    return out


def check_names(lab: Lab | str) -> tuple[str, ...]:
    """Every result name :func:`check_lab` reports for ``lab``, in order."""
    lab = get_lab(lab) if isinstance(lab, str) else lab
    entries = _entries(lab)
    out: list[str] = []
    for base in CHECKS:
        out += [name for b, name, _ in entries if b == base] if base in ("preset", "reproduce") else [base]
    return tuple(out)


def _known(name: str, names: tuple[str, ...], what: str) -> None:
    if name not in CHECKS and name not in names:
        close = difflib.get_close_matches(name, [*CHECKS, *names], n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise UserError(f"{what}: unknown check '{name}'{hint}; checks: {', '.join(CHECKS)}")


@dataclass(frozen=True)
class LabCheck:
    """One conformance check of one lab (a result name of :func:`check_names`); ``str()`` is
    ``LAB-CHECK``, the pytest id. ``run(session)`` gives its :class:`CheckResult`."""

    lab: Lab
    name: str

    def __str__(self) -> str:
        return f"{self.lab.name}-{self.name}"

    @property
    def base(self) -> str:
        """The check's base name (``preset`` for ``preset[example1]``)."""
        return self.name.split("[", 1)[0]

    def run(self, session: Session) -> CheckResult:
        """Run this check in ``session`` (a session of the same lab): passed, failed with the
        check's message, or skipped with its reason (declared by the lab, or NotAvailable)."""
        if session.lab.name != self.lab.name:
            raise UserError(f"check {self}: the session is of lab {session.lab.name}")
        skips = dict(self.lab.conformance_skips)
        reason = skips.get(self.name, skips.get(self.base))
        if reason is not None:
            return CheckResult(self.name, "skipped", f"declared by the lab: {reason}")
        entries = {name: spec for _, name, spec in _entries(self.lab)}
        call: Callable[[], None] = (functools.partial(check_entry, session, entries[self.name]) if self.name in entries
                                    else functools.partial(CHECKS[self.base], session))
        with _registry.REGISTRY.registered(self.lab):
            try:
                call()
            except (NotAvailable, Skip) as err:
                return CheckResult(self.name, "skipped", str(err))
            except AssertionError as err:
                return CheckResult(self.name, "failed", str(err) or "assertion failed")
            except Exception as err:
                return CheckResult(self.name, "failed", first_line(err))
        return CheckResult(self.name, "passed")


def lab_checks(*labs: Lab | str, checks: Iterable[str] | None = None) -> tuple[LabCheck, ...]:
    """Every (lab, check) pair as a :class:`LabCheck`, in :func:`check_names` order: for
    ``labs`` (Lab values or registered names; default every registered lab, by name), and of
    those only ``checks`` (base names or result names) when given. Unknown names (here or in
    a lab's ``conformance_skips``) are a one-line UserError."""
    chosen = [get_lab(lab) if isinstance(lab, str) else lab for lab in (labs or sorted(_registry.REGISTRY))]
    wanted = None if checks is None else list(checks)
    out: list[LabCheck] = []
    for lab in chosen:
        if not isinstance(lab, Lab):
            raise UserError(f"lab_checks takes Lab values or registered lab names, got {type(lab).__name__}")
        names = check_names(lab)
        for name in dict(lab.conformance_skips):
            _known(name, names, f"lab {lab.name}: conformance_skips")
        for name in wanted or ():
            _known(name, names, "checks")
        pairs = [LabCheck(lab, name) for name in names]
        out += [p for p in pairs if wanted is None or p.name in wanted or p.base in wanted]
    return tuple(out)


def check_lab(lab: Lab | str, *, workdir: str | Path | None = None, checks: Iterable[str] | None = None,
              strict: bool = True) -> ConformanceReport:
    """Run the conformance checks on ``lab`` (a :class:`Lab` value, registered or not, or a
    registered name) in one :class:`Session` and return the :class:`ConformanceReport`.

    ``workdir``: where the runs go (a fresh ``{lab}-*`` folder in it, kept); default a
    temporary folder, removed afterwards. ``checks``: names (base names of :data:`CHECKS`
    or result names such as ``preset[example1]``) to run; default all. ``strict``: raise
    :class:`ConformanceError` when a check fails. An unknown check name (here or in
    ``lab.conformance_skips``) is a one-line UserError.
    """
    lab = get_lab(lab) if isinstance(lab, str) else lab
    if not isinstance(lab, Lab):
        raise UserError(f"check_lab takes a Lab value or a registered lab name, got {type(lab).__name__}")
    pairs = lab_checks(lab, checks=checks)
    with contextlib.ExitStack() as stack:
        if workdir is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"stagewise-check-{lab.name}-")))
        else:
            Path(workdir).mkdir(parents=True, exist_ok=True)
            folder = Path(tempfile.mkdtemp(prefix=f"{lab.name}-", dir=workdir))
        session = Session(lab, folder)
        results = tuple(pair.run(session) for pair in pairs)
    report = ConformanceReport(lab.name, results)
    if strict and report.failed:
        raise ConformanceError(report)
    return report
