"""The default tier's cost rule (tests/costbudget.py), run on a throwaway test file in a fresh
pytest process: CPU time of the test and of the processes it starts is charged, wall time is
not (a sleeping test stands for a busy machine), ``slow`` tests are exempt, the failure names
the rule and its off switch, ``STAGEWISE_TEST_BUDGET_S=0`` turns it off, a bad value is one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import costbudget

BURN_S = 0.5
"""CPU (or, for the sleeping test, wall) seconds each throwaway test spends."""
BUDGET_S = 0.05
"""The budget the throwaway session runs under: well above a trivial test's cost, and below BURN_S even at the
reference speed on a machine 10x slower than the reference (the rule divides by the speed factor)."""

THROWAWAY = f'''
import subprocess, sys, time

import pytest


def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.fixture
def costly_fixture():
    burn({BURN_S})


def test_burns_cpu():
    burn({BURN_S})


def test_sleeps():
    time.sleep({BURN_S})


def test_child_burns_cpu():
    code = "import time\\nend = time.process_time() + {BURN_S}\\nwhile time.process_time() < end:\\n    pass"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_slow_burns_cpu():
    burn({BURN_S})


def test_costly_setup(costly_fixture):
    pass


def test_cheap():
    pass
'''


@pytest.fixture
def throwaway(pytester, monkeypatch):
    """run(**env) -> RunResult of a fresh pytest process over THROWAWAY with the cost rule loaded."""
    pytester.makeini("[pytest]\nmarkers =\n    slow: exempt from the cost rule\n")
    pytester.makepyfile(test_throwaway=THROWAWAY)
    monkeypatch.setenv("PYTHONPATH", str(Path(costbudget.__file__).parent))

    def run(**env: str):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return pytester.runpytest_subprocess("-p", "costbudget", "-p", "no:cacheprovider", "-p", "no:xdist",
                                             "-p", "no:randomly", "-rfE", "--cpu-durations=0")

    return run


def test_cpu_is_charged_wall_time_is_not(throwaway):
    result = throwaway(STAGEWISE_TEST_BUDGET_S=str(BUDGET_S), STAGEWISE_SETUP_BUDGET_S=str(BUDGET_S))
    result.assert_outcomes(passed=3, failed=2, errors=1)
    out = result.stdout.str()
    for name in ("test_burns_cpu", "test_child_burns_cpu"):
        assert f"FAILED test_throwaway.py::{name}" in out
    assert "ERROR test_throwaway.py::test_costly_setup" in out
    for name in ("test_sleeps", "test_slow_burns_cpu", "test_cheap"):
        assert f"::{name} " not in out.split("short test summary")[-1]
    assert "the stagewise project's own cost rule" in out
    assert "STAGEWISE_TEST_BUDGET_S=0 turns the rule off" in out
    for when in ("call", "setup"):  # the CPU seconds charged: at least what the test burned
        charged = [float(x) for x in re.findall(rf"its {when} cost ([0-9.]+) CPU-s", out)]
        assert charged and min(charged) >= BURN_S - 0.05, (when, charged)
    assert "costliest tests (CPU seconds" in out


def test_zero_turns_the_rule_off(throwaway):
    result = throwaway(STAGEWISE_TEST_BUDGET_S="0", STAGEWISE_SETUP_BUDGET_S=str(BUDGET_S))
    result.assert_outcomes(passed=6)


@pytest.mark.parametrize("value", ["abc", "-1", "nan"])
def test_a_bad_budget_is_one_line(throwaway, value):
    result = throwaway(STAGEWISE_TEST_BUDGET_S=value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"STAGEWISE_TEST_BUDGET_S={value!r}: a number of CPU seconds >= 0 is allowed" in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


def test_reference_cost_rescales_slow_machines_only():
    assert costbudget.reference_cost(60.0, 2.0) == 30.0
    assert costbudget.reference_cost(60.0, 0.5) == 60.0
    factor = costbudget.speed_factor()
    assert 0.05 < factor < 50  # a measurement of this machine, finite and positive


def test_cpu_seconds_counts_reaped_children():
    import subprocess
    import sys

    before = costbudget.cpu_seconds()
    code = f"import time\nend = time.process_time() + {BUDGET_S}\nwhile time.process_time() < end:\n    pass"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert costbudget.cpu_seconds() - before >= BUDGET_S
