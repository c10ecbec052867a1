"""The default tier's per-test cost rule, as a pytest plugin (tests/conftest.py loads it).

A test of the default tier (not marked ``slow``) may cost at most ``CALL_BUDGET_CPU_S`` CPU
seconds in its call phase and ``SETUP_BUDGET_CPU_S`` in its setup (module fixtures and the
cached runs it is first to need). Cost is CPU time, not wall time::

    cost = delta time.process_time()                                 # this process, all its threads
         + delta getrusage(RUSAGE_CHILDREN).(ru_utime + ru_stime)     # the processes it started and reaped

over the phase. Other work on the machine slows a test's wall clock but not its CPU time, so
a busy machine neither fails a correct test nor hides a costly one. A child process counts
once it has been waited for (``subprocess.run``, a joined pool, a finished sweep worker);
long-lived daemons a test leaves running (a Ray cluster) count only when they are reaped.

The budgets are CPU seconds *at the reference speed*: the speed of the quiet 2-core machine
the tier was sized on, where ``calibration_kernel`` costs ``REF_KERNEL_CPU_S``. One CPU
second is not the same work everywhere: the same tier cost 300-349 CPU-s on that machine and
904-934 CPU-s on a slower one (a shared host), and a core shared with other processes runs a
little slower per CPU second too (its caches are shared). So a test over its budget in
plain CPU seconds is judged again after the kernel is timed (median of
``CALIBRATION_REPEATS``): ``cost / max(1, kernel / REF_KERNEL_CPU_S)`` must stay within the
budget. The factor is never below 1: a faster machine does not tighten the rule. Only tests
over the plain budget pay for the calibration (about 0.1-0.3 s).

The wall clock stays a hang guard only: pytest-timeout (pyproject's ``timeout``, 600 s;
1800 s in the slow tier), far above the budget.

Environment:
- ``STAGEWISE_TEST_BUDGET_S``: the call budget in CPU seconds (default 30); ``0`` turns the
  whole rule off (call and setup), for a user who only wants to know that the install works.
- ``STAGEWISE_SETUP_BUDGET_S``: the setup budget in CPU seconds (default 90); ``0`` turns the
  setup check alone off.

``--cpu-durations=N`` lists the N costliest tests (setup + call, CPU seconds) at the end of
the session, beside pytest's own ``--durations`` (wall).
"""

from __future__ import annotations

import math
import os
import statistics
import time

import pytest

try:
    import resource
except ImportError:  # not on POSIX: the test's own process only
    resource = None  # type: ignore[assignment]

CALL_BUDGET_ENV = "STAGEWISE_TEST_BUDGET_S"
SETUP_BUDGET_ENV = "STAGEWISE_SETUP_BUDGET_S"
CALL_BUDGET_CPU_S = 30.0
"""CPU seconds a default-tier test's call phase may cost (its process and the processes it started)."""
SETUP_BUDGET_CPU_S = 90.0
"""CPU seconds a default-tier test's setup may cost: module fixtures and the cached runs it is first to need."""
COST_PROPERTY = "cpu_s"
"""The name under which each phase's cost goes into the report's user_properties: (cpu_s, {phase: seconds})."""

OVER_BUDGET = (
    "{nodeid}: the test passed, but its {when} cost {cpu:.1f} CPU-s ({wall:.1f} s wall; its process and the "
    "processes it started), {ref:.1f} CPU-s at the reference speed (this machine ran a calibration loop "
    "{factor:.2f}x slower than the reference machine; never counted below 1x), over {budget:g} CPU-s, the "
    "stagewise project's own cost rule for the default test tier. This is not an install or correctness "
    "failure: {env}=0 turns the rule off for a run that only checks the install. (For the project's "
    "developers: make the test cheaper, e.g. share a finished run through "
    "tests/runcache.py or use fewer steps or seeds, or mark it @pytest.mark.slow with the reason.)"
)

REF_KERNEL_CPU_S = 0.025
"""CPU seconds of ``calibration_kernel`` at the reference speed. Measured: 0.046-0.048 s (median
of 5) on the developers' machine in a slow period (load 0, the tier at 904-934 CPU-s and 491-515 s
wall, start-up commands at 2.0x their times in docs/benchmarks.md); the reference is taken 2x faster,
the smaller of the two slow-downs seen (start-up 2.0x, the tier 2.8x), so the rule errs strict."""
CALIBRATION_REPEATS = 5
"""Timings of the kernel whose median gives the machine's current speed factor."""

_COST = pytest.StashKey[dict]()


def cpu_seconds() -> float:
    """CPU seconds used so far by this process (all threads) and by its reaped child processes."""
    own = time.process_time()
    if resource is None:
        return own
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own + children.ru_utime + children.ru_stime


def calibration_kernel() -> int:
    """A fixed amount of pure-Python work (400,000 loop iterations of integer arithmetic): the
    interpreter's speed is what most tests of the tier spend their CPU on."""
    total = 0
    for i in range(400_000):
        total += i * i % 7
    return total


def speed_factor() -> float:
    """How much slower than the reference this machine runs now: median kernel time / REF_KERNEL_CPU_S."""
    timings = []
    for _ in range(CALIBRATION_REPEATS):
        start = time.process_time()
        calibration_kernel()
        timings.append(time.process_time() - start)
    return statistics.median(timings) / REF_KERNEL_CPU_S


def reference_cost(cpu_s: float, factor: float) -> float:
    """CPU seconds at the reference speed: cpu_s / max(1, factor) (a faster machine is not rescaled)."""
    return cpu_s / max(1.0, factor)


def _budget_from_env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise pytest.UsageError(f"{name}={raw!r}: a number of CPU seconds >= 0 is allowed (0 turns the check off)")
    return value


def budgets() -> dict[str, float]:
    """{phase: CPU seconds} from the environment; a phase with 0 is not checked."""
    call = _budget_from_env(CALL_BUDGET_ENV, CALL_BUDGET_CPU_S)
    setup = _budget_from_env(SETUP_BUDGET_ENV, SETUP_BUDGET_CPU_S)
    if call == 0:  # the one switch: the whole rule off
        setup = 0.0
    return {"setup": setup, "call": call}


def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="list the N tests with the largest CPU cost (setup + call; 0 for all)")


def pytest_configure(config):
    config.pluginmanager.register(CostRule(budgets(), config.getoption("--cpu-durations")), "stagewise-cost-rule")


def _measured(item, phase: str):
    start = cpu_seconds()
    try:
        return (yield)
    finally:
        item.stash.setdefault(_COST, {})[phase] = cpu_seconds() - start


class CostRule:
    """The rule of one session: budgets {phase: CPU-s} (0: unchecked) and, in the process that
    reports (xdist's controller or a single process), every test's cost {nodeid: {phase: CPU-s}}."""

    def __init__(self, phase_budgets: dict[str, float], listed: int | None):
        self.budgets = phase_budgets
        self.listed = listed
        self.costs: dict[str, dict[str, float]] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item):
        return (yield from _measured(item, "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        return (yield from _measured(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        cpu = item.stash.get(_COST, {}).get(call.when)
        if cpu is None:
            return report
        report.user_properties.append((COST_PROPERTY, {call.when: round(cpu, 3)}))
        budget = self.budgets.get(call.when, 0.0)
        if budget <= 0 or not report.passed or item.get_closest_marker("slow") is not None or cpu <= budget:
            return report
        factor = speed_factor()
        if reference_cost(cpu, factor) > budget:
            report.outcome = "failed"
            report.longrepr = OVER_BUDGET.format(nodeid=item.nodeid, when=call.when, cpu=cpu, wall=call.duration,
                                                 factor=factor, ref=reference_cost(cpu, factor), budget=budget,
                                                 env=CALL_BUDGET_ENV)
        return report

    def pytest_runtest_logreport(self, report):
        for name, value in report.user_properties:
            if name == COST_PROPERTY:
                self.costs.setdefault(report.nodeid, {}).update(value)

    def pytest_terminal_summary(self, terminalreporter, config):
        if self.listed is None or hasattr(config, "workerinput"):
            return
        rows = sorted(((sum(p.values()), p.get("setup", 0.0), p.get("call", 0.0), nodeid)
                       for nodeid, p in self.costs.items()), reverse=True)
        total = sum(row[0] for row in rows)
        terminalreporter.write_sep("=", f"costliest tests (CPU seconds, setup + call; {total:.0f} CPU-s in all)")
        for cpu, setup, call, nodeid in rows[: self.listed or None]:
            terminalreporter.write_line(f"{cpu:8.2f}  (setup {setup:6.2f}, call {call:6.2f})  {nodeid}")
