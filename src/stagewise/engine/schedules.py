"""Learning-rate schedules: pure functions of the step, one per shape of the rate over time.

Every lab takes its rate at step ``t`` from here and keeps only the mapping from its config
to a schedule (which function, which of its fields are the arguments). Each function is
pure: the rate depends on the step and the arguments only, so a resumed run needs no
scheduler state. The rates may be Python floats (one model) or tensors of per-member rates
(S,) (an ensemble whose members have their own hyper-parameters); ``t1`` of
:func:`two_stage` may be a per-member tensor too. The arithmetic is the same in both forms,
so member i of a batched call equals the scalar call with member i's values, bit for bit
(float64). A tensor result is a new tensor, never one of the arguments.

With ``t`` the step (the update number: 1-based in the theory labs, 0-based optimizer steps
in the LM lab, as each lab's mapping says)::

    constant      lr_t = lr
    two_stage     lr_t = lr_stage1 for t <= t1, lr_stage2 after     (step annealing)
    cosine        lr_t = lr_end + (lr_start - lr_end) (1 + cos(pi min(t, T) / T)) / 2
    linear_warmup lr_t = lr t / T_w for t <= T_w, lr after            (0 at t = 0)
    exponential   lr_t = lr gamma^t                                  (t counts decays, e.g. epochs - 1)

(T and T_w count at least 1.) Example::

    from stagewise.engine import schedules
    schedules.two_stage(301, 1.0, 0.1, t1=300)             # 0.1
    schedules.cosine(50, 100, torch.tensor([1.0, 0.5]))   # tensor([0.5000, 0.2500])
"""

from __future__ import annotations

import math
from typing import TypeVar, Union, overload

import torch

Rate = Union[float, torch.Tensor]
"""A learning rate: one number, or one per ensemble member (S,)."""

R = TypeVar("R", float, torch.Tensor)
"""The kind of rate a schedule is given, and returns."""


def _fresh(rate: R) -> R:
    """``rate`` itself for a number; a copy of a tensor (results never alias an argument)."""
    return rate.clone() if isinstance(rate, torch.Tensor) else rate


def constant(step: int, lr: R) -> R:
    """The same rate at every step: ``lr`` (a tensor is copied)."""
    return _fresh(lr)


@overload
def two_stage(step: int, lr_stage1: float, lr_stage2: float, t1: int) -> float: ...
@overload
def two_stage(step: int, lr_stage1: torch.Tensor, lr_stage2: torch.Tensor, t1: int | torch.Tensor) -> torch.Tensor: ...
def two_stage(step: int, lr_stage1: Rate, lr_stage2: Rate, t1: int | torch.Tensor) -> Rate:
    """Step annealing: ``lr_stage1`` up to and including step ``t1``, ``lr_stage2`` after.

    Numbers, or per-member rates (S,) with one ``t1`` or a per-member ``t1`` (S,): each
    member then switches at its own step (``torch.where``).
    """
    if isinstance(t1, torch.Tensor):
        return torch.where(step <= t1, lr_stage1, lr_stage2)  # (S,)
    rate = lr_stage1 if step <= t1 else lr_stage2
    return rate.clone() if isinstance(rate, torch.Tensor) else rate


def cosine(step: int, total: int, lr_start: R, lr_end: R | float = 0.0) -> R:
    """Half a cosine from ``lr_start`` at step 0 to ``lr_end`` at step ``total`` (held there
    after): lr_end + (lr_start - lr_end) (1 + cos(pi min(t, total) / total)) / 2."""
    return lr_end + (lr_start - lr_end) * 0.5 * (1 + math.cos(math.pi * min(step, total) / max(total, 1)))


def linear_warmup(step: int, warmup_steps: int, lr: R) -> R:
    """A linear ramp: lr t / warmup_steps for t <= warmup_steps (0 at step 0), ``lr`` after.
    Labs switch to their main schedule after the ramp."""
    if step > warmup_steps:
        return _fresh(lr)
    return lr * step / max(1, warmup_steps)


def exponential(step: int, lr: R, gamma: float) -> R:
    """Geometric decay: lr gamma^step (``step`` counts the decays so far, e.g. epoch - 1)."""
    return lr * gamma ** step


__all__ = ["Rate", "constant", "cosine", "exponential", "linear_warmup", "two_stage"]
