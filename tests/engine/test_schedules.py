"""The learning-rate schedules (stagewise.engine.schedules): closed forms at the boundaries,
batched (per-member tensors) == scalar bit for bit, and no result aliasing an argument."""

from __future__ import annotations

import math

import pytest
import torch

from stagewise.engine import schedules

ROUNDOFF = 1e-15  # relative: a few float64 operations away from the closed form


def test_constant_is_the_rate_at_every_step_and_a_copy():
    assert [schedules.constant(t, 0.3) for t in (0, 1, 10**6)] == [0.3, 0.3, 0.3]
    lr = torch.tensor([0.3, 0.7], dtype=torch.float64)
    out = schedules.constant(5, lr)
    assert torch.equal(out, lr) and out.data_ptr() != lr.data_ptr()


def test_two_stage_switches_after_t1():
    assert schedules.two_stage(0, 1.0, 0.1, 300) == 1.0
    assert schedules.two_stage(300, 1.0, 0.1, 300) == 1.0  # t1 itself is still stage 1
    assert schedules.two_stage(301, 1.0, 0.1, 300) == 0.1
    assert schedules.two_stage(1, 1.0, 0.1, 0) == 0.1  # t1 = 0: no first stage
    rates = torch.tensor([1.0, 0.5]), torch.tensor([0.1, 0.2])
    t1 = torch.tensor([10.0, 20.0])  # per member, as the disentangled lab's hyper-parameters
    assert schedules.two_stage(10, *rates, t1).tolist() == [1.0, 0.5]
    assert schedules.two_stage(11, *rates, t1).tolist() == pytest.approx([0.1, 0.5])
    assert schedules.two_stage(21, *rates, t1).tolist() == pytest.approx([0.1, 0.2])
    out = schedules.two_stage(5, *rates, 10)  # one t1 for every member: a copy of the stage's rates
    assert torch.equal(out, rates[0]) and out.data_ptr() != rates[0].data_ptr()


def test_cosine_closed_form():
    start, end, total = 0.8, 0.1, 40
    assert schedules.cosine(0, total, start, end) == pytest.approx(start, rel=ROUNDOFF)
    assert schedules.cosine(total, total, start, end) == end  # cos(pi) = -1: exactly the end rate
    assert schedules.cosine(total // 2, total, start, end) == pytest.approx((start + end) / 2, rel=ROUNDOFF)
    assert schedules.cosine(total + 7, total, start, end) == end  # held after the last step
    t = 13
    assert schedules.cosine(t, total, start, end) == pytest.approx(end + (start - end) * (1 + math.cos(math.pi * t / total)) / 2,
                                                                  rel=ROUNDOFF)
    assert schedules.cosine(0, total, 0.5) == pytest.approx(0.5, rel=ROUNDOFF)  # to 0 by default
    assert schedules.cosine(total, total, 0.5) == 0.0


def test_linear_warmup_closed_form():
    assert schedules.linear_warmup(0, 4, 0.5) == 0.0
    assert schedules.linear_warmup(2, 4, 0.5) == 0.25
    assert schedules.linear_warmup(4, 4, 0.5) == 0.5
    assert schedules.linear_warmup(9, 4, 0.5) == 0.5
    assert [schedules.linear_warmup(t, 0, 0.5) for t in (1, 2)] == [0.5, 0.5]  # no ramp


def test_exponential_closed_form():
    assert schedules.exponential(0, 3e-5, 0.95) == 3e-5
    assert schedules.exponential(4, 3e-5, 0.95) == pytest.approx(3e-5 * 0.95 ** 4, rel=ROUNDOFF)


def _members(n: int = 5) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    draw = lambda lo, hi: lo + (hi - lo) * torch.rand(n, generator=gen, dtype=torch.float64)  # noqa: E731
    return {"lr_stage1": draw(0.5, 2.0), "lr_stage2": draw(0.01, 0.4), "t1": torch.tensor([0.0, 3.0, 7.0, 12.0, 30.0],
                                                                                          dtype=torch.float64)}


@pytest.mark.parametrize("name", ["constant", "two_stage", "cosine", "linear_warmup", "exponential"])
def test_batched_equals_scalar_bit_for_bit(name):
    """Member i of a call with (S,) rates equals the call with member i's numbers (float64)."""
    hyper = _members()
    total, warmup = 25, 6
    calls = {
        "constant": lambda t, h: schedules.constant(t, h["lr_stage1"]),
        "two_stage": lambda t, h: schedules.two_stage(t, h["lr_stage1"], h["lr_stage2"], h["t1"]),
        "cosine": lambda t, h: schedules.cosine(t, total, h["lr_stage1"], h["lr_stage2"]),
        "linear_warmup": lambda t, h: schedules.linear_warmup(t, warmup, h["lr_stage1"]),
        "exponential": lambda t, h: schedules.exponential(t, h["lr_stage1"], 0.9),
    }
    call = calls[name]
    for t in range(0, 35):
        batched = call(t, hyper)
        assert isinstance(batched, torch.Tensor) and batched.shape == (5,) and batched.dtype == torch.float64
        for i in range(5):
            one = {k: v[i].item() for k, v in hyper.items()}
            one["t1"] = int(one["t1"])
            scalar = call(t, one)
            assert isinstance(scalar, float)
            assert batched[i].item() == scalar, (name, t, i)
