"""When a tracked training is probed (issues 29 and 39): the record schedules and the budget rule.

A :class:`~stagewise.orchestrate.track.Tracker` (and the Trainer's callback) probes at the
steps its schedule names, at every step it is asked to (``force=True``), and never at or
before its last record:

=============  ===========================================================================
schedule       probes at
=============  ===========================================================================
``every=k``    every k-th step: 0, k, 2k, ...
budget         (``every=0``, the default) the first step given, then as often as ``budget``
               of the training time allows (:class:`BudgetRule`), never within
               :data:`MIN_BUDGET_GAP` steps of the last record
``log``        step 0 and the powers of two up to ``log_until`` (1, 2, 4, ..., 512 by
               default, Pythia's), then every k-th step after it (``every=k``; ``every=0``:
               the budget rule after it)
``steps``      exactly the listed steps (``steps=[...]``, increasing)
=============  ===========================================================================

The schedule is part of the run's config (``source.schedule``, ``source.every``,
``source.log_until``, ``source.probe_steps``, ``source.budget``), so a resumed run keeps it.

Example::

    schedule = schedule_of(every=1000, schedule="log")    # Pythia: 0, 1, 2, 4, ..., 512, 1000, 2000, ...
    [s for s in range(2100) if schedule.fixed(s)]           # [0, 1, 2, 4, ..., 512, 1000, 2000]
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

from ..config import MAX_RECORD_STEP, MAX_STEPS, whole_number
from ..errors import UserError
from ..errors import short_repr as shown

SCHEDULES = ("every", "log", "steps")
"""The schedules' names (``source.schedule``); ``every`` with ``every=0`` is the budget rule."""

LOG_UNTIL = 512
"""``schedule="log"``: the last power of two probed by default (Pythia's checkpoints: 0, 1, 2,
4, ..., 512, then every 1000 steps)."""

MAX_SCHEDULE_STEPS = 10_000
"""Most steps an explicit schedule may list (they are written into config.yaml; Pythia has 154)."""

MIN_BUDGET_GAP = 2
"""The budget rule never probes within this many steps of the last record (at step s, the next
budget probe is at s + 2 or later): a probe's time saved up earlier is spent spread out, not on
consecutive steps."""


@dataclass(frozen=True)
class Schedule:
    """A validated record schedule (module docstring): ``kind`` one of :data:`SCHEDULES`,
    ``every`` the period (0: the budget rule), ``log_until`` the last power of two of a log
    schedule (0 otherwise), ``steps`` an explicit schedule's steps, increasing."""

    kind: str = "every"
    every: int = 0
    log_until: int = 0
    steps: tuple[int, ...] = ()
    _listed: frozenset[int] = field(default=frozenset(), repr=False, compare=False)

    def fixed(self, step: int) -> bool | None:
        """Whether the schedule probes at ``step``; None where the budget rule decides."""
        if self.kind == "steps":
            return step in self._listed
        if self.kind == "log" and step <= self.log_until:
            return step == 0 or step & (step - 1) == 0  # 0 and the powers of two
        if self.every:
            return step % self.every == 0
        return None

    def source(self) -> dict[str, Any]:
        """The schedule as the run config's ``source`` entries."""
        return {"schedule": self.kind, "every": self.every, "log_until": self.log_until, "probe_steps": list(self.steps)}


def schedule_of(every: Any = 0, schedule: Any = None, log_until: Any = None, steps: Any = None) -> Schedule:
    """The :class:`Schedule` of a tracker's arguments, checked: ``every`` a whole number >= 0;
    ``schedule`` one of :data:`SCHEDULES` (None: ``steps`` when a list is given, else ``every``);
    ``log_until`` a whole number >= 1, only with ``schedule="log"`` (None: :data:`LOG_UNTIL`);
    ``steps`` a non-empty increasing list of whole numbers in [0, :data:`MAX_RECORD_STEP`], at
    most :data:`MAX_SCHEDULE_STEPS`, only alone (no ``every``). One UserError line otherwise."""
    period = whole_number(every)
    if period is None or not 0 <= period <= MAX_STEPS:
        raise UserError(f"every={shown(every)}: probe every k steps, k a whole number from 0 to {MAX_STEPS} "
                        "(0: the budget rule)")
    if schedule is None:
        schedule = "steps" if steps is not None else "every"
    if not isinstance(schedule, str) or schedule not in SCHEDULES:
        raise UserError(f"schedule={shown(schedule)}: one of 'every' (every k steps; every=0: the budget rule), 'log' "
                        f"(0 and the powers of two up to log_until, then every k) or 'steps' (steps=[...])")
    if steps is not None and schedule != "steps":
        raise UserError(f"steps={shown(steps)}: an explicit schedule is schedule='steps' (this one is {schedule!r}); "
                        "give steps alone")
    if log_until is not None and schedule != "log":
        raise UserError(f"log_until={shown(log_until)}: the last power of two of schedule='log' (this schedule is "
                        f"{schedule!r}); leave it out or give schedule='log'")
    if schedule == "log":
        until = LOG_UNTIL if log_until is None else whole_number(log_until)
        if until is None or not 1 <= until <= MAX_STEPS:
            raise UserError(f"log_until={shown(log_until)}: the last power of two probed by schedule='log', a whole "
                            f"number from 1 to {MAX_STEPS} (default {LOG_UNTIL})")
        return Schedule("log", period, until)
    if schedule == "every":
        return Schedule("every", period)
    if period:
        raise UserError(f"every={period} with steps=[...]: give one schedule (the listed steps, or every k steps)")
    listed = step_list(steps)
    return Schedule("steps", 0, 0, listed, frozenset(listed))


def step_list(steps: Any) -> tuple[int, ...]:
    """An explicit schedule's steps checked (see :func:`schedule_of`)."""
    if steps is None or isinstance(steps, (str, bytes, Mapping)) or not hasattr(steps, "__iter__"):
        raise UserError(f"steps={shown(steps)}: the steps to probe at, a list of whole numbers >= 0 in increasing order")
    if hasattr(steps, "__len__") and len(steps) > MAX_SCHEDULE_STEPS:
        raise UserError(f"steps: {len(steps)} steps listed; at most {MAX_SCHEDULE_STEPS} (a longer series is "
                        "every=k or schedule='log')")
    values = list(itertools.islice(steps, MAX_SCHEDULE_STEPS + 1))  # a generator is read this far only
    if not values:
        raise UserError("steps=[]: no step to probe at; list at least one (or leave steps out)")
    if len(values) > MAX_SCHEDULE_STEPS:
        raise UserError(f"steps: more than {MAX_SCHEDULE_STEPS} steps listed (a longer series is every=k or schedule='log')")
    out: list[int] = []
    for i, value in enumerate(values):
        number = whole_number(value)
        if number is None or not 0 <= number <= MAX_RECORD_STEP:
            raise UserError(f"steps[{i}]={shown(value)}: a training step is a whole number from 0 to {MAX_RECORD_STEP} (int64)")
        if out and number <= out[-1]:
            raise UserError(f"steps[{i}]={number}: the steps increase (steps[{i - 1}]={out[-1]})")
        out.append(number)
    return tuple(out)


class BudgetRule:
    """The budget rule's accounting (``every=0``): the time spent probing against the training
    time, read from ``clock`` (seconds; :func:`time.perf_counter`, a simulated one in tests).

    A probe is due at ``step`` when nothing was timed yet (the first step given), else when all of

    * ``step >= last_step + MIN_BUDGET_GAP`` (never two steps in a row);
    * ``probing + 2 * last_probe <= budget * training``: the time spent probing so far, plus the
      next probe and one kept for the final record, within ``budget`` of the training time
      since the first probe (so a training that ends with a forced probe has spent at most
      about ``budget`` of its training time probing, the first and the final probe included);
    * ``last_probe <= budget * since``: the training time since the last probe ended is at
      least the last probe's time / ``budget``, so time saved up while probes were slow (the
      first one, a warm-up) is not spent in a burst of probes on consecutive steps.

    Every probe counts, forced ones too. After a resume the accounting starts again
    (:meth:`restart`): the first step past the gap probes and times a probe again.
    """

    def __init__(self, budget: float, clock: Callable[[], float] = time.perf_counter):
        self.budget, self.clock = budget, clock
        self.started: float | None = None  # when the accounting started (the first probe, or a resume)
        self.probing = 0.0  # seconds spent probing since then
        self.last_probe = 0.0  # the last probe's seconds (the reserve kept for the final probe)
        self.last_end = 0.0  # when the last probe ended

    def due(self, step: int, last_step: int | None) -> bool:
        """Whether the budget allows a probe at ``step`` (the last record at ``last_step``)."""
        if self.started is None:
            return True
        if last_step is not None and step < last_step + MIN_BUDGET_GAP:
            return False
        now = self.clock()
        training = now - self.started - self.probing
        return (self.probing + 2 * self.last_probe <= self.budget * training
                and self.last_probe <= self.budget * (now - self.last_end))

    def begin(self) -> float:
        """A probe starts: returns its start time (the accounting starts with the first probe)."""
        began = self.clock()
        if self.started is None:
            self.started = began
        return began

    def end(self, began: float) -> None:
        """The probe begun at ``began`` ended: its time is counted."""
        self.last_end = self.clock()
        self.last_probe = self.last_end - began
        self.probing += self.last_probe

    def restart(self) -> None:
        """A resumed run: the accounting starts now, with nothing timed."""
        self.started = self.last_end = self.clock()
        self.probing = self.last_probe = 0.0
