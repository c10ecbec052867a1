"""Stage detection on synthetic long-form metric frames."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from stagewise.measure import crossing_step, crossing_steps, detect_stages

STEPS = np.arange(0, 100, 5)  # logged every 5 steps
OFFSETS = {0: 0, 1: 10, 2: 20}  # per-seed delay


def _frame(spike: bool = False) -> pd.DataFrame:
    """acc.P rises to 1 at step 20 + offset, acc.Q at 50 + offset; loss.Q falls below 0.1 then."""
    rows = []
    for seed, off in OFFSETS.items():
        for step in STEPS:
            p = 1.0 if step >= 20 + off else 0.2
            if spike and step == 5:
                p = 1.0  # one noisy early crossing
            q = 1.0 if step >= 50 + off else 0.3
            rows += [
                (step, seed, "acc.P", p),
                (step, seed, "acc.Q", q),
                (step, seed, "loss.Q", 1.0 - q),
                (step, seed, "never", 0.0),
            ]
    return pd.DataFrame(rows, columns=["step", "seed", "metric", "value"])


def test_crossing_step_basic_and_sustain():
    steps = np.array([0, 1, 2, 3, 4, 5])
    values = np.array([0.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    assert crossing_step(steps, values, 0.5) == 1.0
    assert crossing_step(steps, values, 0.5, sustain=2) == 3.0
    assert crossing_step(steps, values, 0.5, sustain=3) == 3.0
    assert math.isnan(crossing_step(steps, values, 0.5, sustain=4))
    assert crossing_step(steps, values, 0.0, direction="below") == 0.0
    assert crossing_step(steps[::-1], values[::-1], 0.5, sustain=2) == 3.0  # sorted by step
    assert math.isnan(crossing_step(steps, np.full(6, np.nan), 0.5))
    assert math.isnan(crossing_step(steps[:0], values[:0], 0.5))


def test_crossing_steps_per_seed_offsets():
    frame = _frame()
    assert crossing_steps(frame, "acc.P", 0.9) == {0: 20.0, 1: 30.0, 2: 40.0}
    assert crossing_steps(frame, "loss.Q", 0.1, direction="below") == {0: 50.0, 1: 60.0, 2: 70.0}
    assert crossing_steps(frame, "acc.P", 0.9, seeds=[2]) == {2: 40.0}
    assert math.isnan(crossing_steps(frame, "acc.P", 0.9, seeds=[7])[7])


def test_sustain_ignores_one_step_spike():
    frame = _frame(spike=True)
    assert crossing_steps(frame, "acc.P", 0.9) == {0: 5.0, 1: 5.0, 2: 5.0}
    assert crossing_steps(frame, "acc.P", 0.9, sustain=2) == {0: 20.0, 1: 30.0, 2: 40.0}
    report = detect_stages(frame, {"P": ("acc.P", 0.9, "above")}, sustain=3)
    assert report.per_seed["P"] == {0: 20.0, 1: 30.0, 2: 40.0}


def test_detect_stages_summary_and_order():
    criteria = {
        "never": ("never", 0.5, "above"),
        "Q learned": ("loss.Q", 0.1, "below"),
        "P learned": ("acc.P", 0.9, "above"),
    }
    report = detect_stages(_frame(), criteria)
    assert report.order == ["P learned", "Q learned", "never"]
    assert report.mean["P learned"] == 30.0 and report.mean["Q learned"] == 60.0
    assert report.std["P learned"] == pytest.approx(10.0)  # sample std of 20, 30, 40
    assert report.min["Q learned"] == 50.0 and report.max["Q learned"] == 70.0
    assert report.n_reached == {"never": 0, "Q learned": 3, "P learned": 3}
    assert report.n_seeds == {"never": 3, "Q learned": 3, "P learned": 3}
    assert all(math.isnan(report.per_seed["never"][s]) for s in OFFSETS)
    assert math.isnan(report.mean["never"]) and math.isnan(report.std["never"])
    assert report.ordered_in_every_seed("P learned", "Q learned")
    assert not report.ordered_in_every_seed("Q learned", "P learned")
    assert report.ordered_in_every_seed("P learned", "never")  # second unreached: fine
    assert not report.ordered_in_every_seed("never", "P learned")  # first never reached
    assert not report.ordered_in_every_seed("P learned", "P learned")  # ties are not ordered
    blob = json.loads(json.dumps(report.as_dict(), allow_nan=False))
    assert blob["order"] == report.order
    assert blob["stages"]["never"]["mean"] is None
    assert blob["stages"]["P learned"]["per_seed"] == {"0": 20.0, "1": 30.0, "2": 40.0}


def test_order_puts_mostly_unreached_stage_last():
    frame = _frame()
    late = frame[(frame["metric"] == "acc.Q") & (frame["seed"] != 0)].assign(value=0.0)
    frame = pd.concat([frame[~((frame["metric"] == "acc.Q") & (frame["seed"] != 0))], late])
    report = detect_stages(frame, {"Q": ("acc.Q", 0.9, "above"), "P": ("acc.P", 0.9, "above")})
    assert report.n_reached["Q"] == 1 and report.std["Q"] != report.std["Q"]  # NaN std with one seed
    assert report.order == ["P", "Q"]  # Q reached at 50 in seed 0 only: median is +inf


def test_bad_criteria_raise_before_work():
    frame = _frame()
    with pytest.raises(ValueError, match="not in the metrics frame"):
        detect_stages(frame, {"X": ("acc.Typo", 0.5, "above")})
    with pytest.raises(ValueError, match="direction"):
        detect_stages(frame, {"X": ("acc.P", 0.5, "up")})
    with pytest.raises(ValueError, match="sustain"):
        crossing_step(STEPS, STEPS, 1.0, sustain=0)
    with pytest.raises(ValueError, match="must be"):
        detect_stages(frame, {"X": ("acc.P", 0.5)})
