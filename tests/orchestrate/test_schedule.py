"""Record schedules of tracked runs (issue 39): every k, log-spaced (Pythia's), an explicit
list, and the budget rule, which never probes two steps in a row. The budget rule runs on a
simulated clock here (no sleeping): a slow first probe (a warm-up) then fast ones is the case
where the rule before issue 39 spent its saved-up time in a burst on consecutive steps."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch

from stagewise import UserError
from stagewise.orchestrate.schedule import LOG_UNTIL, MAX_SCHEDULE_STEPS, MIN_BUDGET_GAP, BudgetRule, schedule_of
from cli_errors import raised_one_line as one_line

BUDGET = 0.1




def probed(schedule: Any, until: int) -> list[int]:
    return [s for s in range(until + 1) if schedule.fixed(s)]


# ------------------------------------------------------------------ the fixed schedules
def test_the_log_schedule_is_pythias():
    """Pythia's checkpoints: 0, 1, 2, 4, ..., 512, then every 1000 steps."""
    pythia = schedule_of(every=1000, schedule="log")
    assert pythia.log_until == LOG_UNTIL == 512
    assert probed(pythia, 5000) == [0] + [2**i for i in range(10)] + [1000, 2000, 3000, 4000, 5000]
    short = schedule_of(every=3, schedule="log", log_until=np.int64(8))
    assert probed(short, 16) == [0, 1, 2, 4, 8, 9, 12, 15]
    budget_after = schedule_of(schedule="log", log_until=4)  # every=0: the budget rule decides after log_until
    assert [budget_after.fixed(s) for s in range(7)] == [True, True, True, False, True, None, None]
    assert pythia.source() == {"schedule": "log", "every": 1000, "log_until": 512, "probe_steps": []}


def test_every_and_explicit_steps():
    assert probed(schedule_of(every=3), 10) == [0, 3, 6, 9]
    assert schedule_of().fixed(7) is None and schedule_of().kind == "every"  # the budget rule
    for steps in ([0, 5, 7], (0, 5, 7), np.array([0, 5, 7]), torch.tensor([0, 5, 7]), range(0, 8, 5), iter([0, 5, 7])):
        listed = schedule_of(steps=steps)
        expected = [0, 5] if isinstance(steps, range) else [0, 5, 7]
        assert listed.kind == "steps" and probed(listed, 20) == expected
        assert listed.source()["probe_steps"] == expected
    assert schedule_of(steps=[2**63 - 1]).steps == (2**63 - 1,)  # int64's largest


@pytest.mark.parametrize("kwargs, needle", [
    ({"every": -1}, "every=-1"), ({"every": 1.5}, "every=1.5"), ({"every": True}, "every=True"),
    ({"every": 10**10}, "from 0 to 1000000000"), ({"schedule": "linear"}, "schedule='linear'"),
    ({"schedule": 3}, "schedule=3"), ({"schedule": "log", "log_until": 0}, "log_until=0"),
    ({"schedule": "log", "log_until": "8"}, "log_until='8'"), ({"log_until": 8}, "this schedule is 'every'"),
    ({"schedule": "every", "steps": [1]}, "give steps alone"), ({"schedule": "log", "steps": [1]}, "give steps alone"),
    ({"steps": []}, "steps=[]"), ({"steps": [3, 3]}, "steps[1]=3: the steps increase"),
    ({"steps": [5, 2]}, "steps[1]=2"), ({"steps": [-1]}, "steps[0]=-1"), ({"steps": [1.5]}, "steps[0]=1.5"),
    ({"steps": [True]}, "steps[0]=True"), ({"steps": [2**63]}, "int64"), ({"steps": "12"}, "steps='12'"),
    ({"steps": {1: 2}}, "steps={1: 2}"), ({"steps": 5}, "steps=5"), ({"schedule": "steps"}, "steps=None"),
    ({"steps": [1, 2], "every": 5}, "give one schedule"), ({"steps": range(MAX_SCHEDULE_STEPS + 1)}, "at most 10000"),
    ({"steps": itertools.count()}, "more than 10000"),
], ids=lambda v: str(v)[:40] if isinstance(v, dict) else None)
def test_a_bad_schedule_is_one_line(kwargs, needle):
    with pytest.raises(UserError) as err:
        schedule_of(**kwargs)
    assert needle in one_line(err)


# ------------------------------------------------------------------ the budget rule on a simulated clock
class Clock:
    """A simulated clock: seconds that pass only when the simulation says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RuleBefore39(BudgetRule):
    """The rule before issue 39: the cumulative condition alone (no gap, no spacing)."""

    def due(self, step: int, last_step: int | None) -> bool:
        if self.started is None:
            return True
        training = self.clock() - self.started - self.probing
        return self.probing + 2 * self.last_probe <= self.budget * training


def simulate(rule_class: type[BudgetRule], steps: int = 6000, step_s: float = 0.05, first_s: float = 5.0,
             probe_s: float = 0.1, epoch: int = 2000) -> tuple[list[tuple[int, bool]], float, float]:
    """A training of ``steps`` steps of ``step_s`` seconds, probed by the budget rule, forced at the
    start, at every ``epoch`` steps and at the end; the first probe takes ``first_s`` seconds (a
    warm-up), the others ``probe_s``. Returns the records (step, forced), the seconds spent
    probing and the training seconds."""
    clock = Clock()
    rule = rule_class(BUDGET, clock=clock)
    records: list[tuple[int, bool]] = []
    for step in range(steps + 1):
        last = records[-1][0] if records else None
        forced = step == 0 or step % epoch == 0 or step == steps
        if forced or rule.due(step, last):
            began = rule.begin()
            clock.now += probe_s if records else first_s
            rule.end(began)
            records.append((step, forced))
        clock.now += step_s  # the training step
    return records, rule.probing, clock.now - rule.probing


def test_the_budget_rule_never_probes_two_steps_in_a_row():
    """With a slow first probe the old rule saves up time and spends it on consecutive steps,
    from the step after an epoch end's forced probe on (the scenario has teeth); the rule now keeps MIN_BUDGET_GAP steps after every record (a
    forced one too) and spaces the probes by their time / budget, within the same budget."""
    old, _, _ = simulate(RuleBefore39)
    old_gaps = [b - a for (a, _), (b, forced) in zip(old, old[1:]) if not forced]
    assert old_gaps.count(1) > 20  # bursts: a budget probe on the very next step, many times

    records, probing, training = simulate(BudgetRule)
    steps = [s for s, _ in records]
    budget_gaps = [b - a for (a, _), (b, forced) in zip(records, records[1:]) if not forced]
    assert min(budget_gaps) >= MIN_BUDGET_GAP
    assert min(budget_gaps) >= 20  # spaced by a probe's time / budget: 0.1 s / 0.1 = 1 s = 20 steps of 0.05 s
    assert not any(s + 1 in steps for s, forced in records if forced and s + 1 != steps[-1])  # nothing right after an epoch end
    assert len([r for r in records if not r[1]]) > 10  # the budget still probes, spread out
    assert probing <= BUDGET * training + 1e-9  # the final forced probe included
    old_probing = sum(0.1 for _ in old[1:]) + 5.0
    assert probing <= old_probing + 1e-9  # the spacing takes probes away, never adds one


def test_the_budget_rule_gap_holds_when_steps_are_slow():
    """Steps slower than a probe's time / budget (the budget alone would allow a probe at every
    step): still never two steps in a row."""
    records, probing, training = simulate(BudgetRule, steps=200, step_s=5.0, first_s=0.1, probe_s=0.1, epoch=10**9)
    gaps = [b - a for (a, _), (b, forced) in zip(records, records[1:]) if not forced]
    assert gaps and set(gaps) == {MIN_BUDGET_GAP}
    assert probing <= BUDGET * training


def test_a_restarted_budget_rule_probes_at_the_first_step_past_the_gap():
    clock = Clock()
    rule = BudgetRule(BUDGET, clock=clock)
    assert rule.due(7, None)  # nothing timed: the first step given
    clock.now = 100.0
    rule.restart()  # a resumed run, its last record at step 7
    assert not rule.due(7 + MIN_BUDGET_GAP - 1, 7) and rule.due(7 + MIN_BUDGET_GAP, 7)
