"""The causal accuracy claim against its control as one paired difference (annealgain.py), on
stage tables written by hand: the verdict engine's interval of the median is recomputed from the
tables, the claim fails where the control gains like the real arm, is inconclusive where the
differences straddle 0 or there are fewer pairs than its 6, and the bootstrap description stays."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stagewise.labs.disentangled.annealgain import difference_interval, gain_beyond_control, gain_differences
from stagewise.report.seedstats import bootstrap_interval
from stagewise.report.verdicts import ENGINE, median_interval

SEEDS = [0, 1, 2, 3, 4, 5]


def arm(variant: str, q_end: list[float], seeds: list[int] = SEEDS) -> pd.DataFrame:
    rows = [{"group": "g", "variant": variant, "seed": s, "stage": stage, "step": step, "test.acc.q_part": acc}
            for stage, step, accs in (("stage1", 40, [0.5] * len(seeds)), ("stage2", 1200, q_end)) for s, acc in zip(seeds, accs)]
    return pd.DataFrame(rows)


REAL = [0.96, 0.94, 0.95, 0.94, 0.93, 0.97]
FLAT = [0.59, 0.56, 0.49, 0.46, 0.52, 0.50]
CTRL = [0.52, 0.48, 0.50, 0.55, 0.51, 0.49]
CTRL_FLAT = [0.50, 0.51, 0.47, 0.49, 0.52, 0.48]
TABLE = pd.concat([arm("baseline", REAL), arm("no-anneal", FLAT), arm("baseline|control", CTRL),
                   arm("no-anneal|control", CTRL_FLAT)])


def test_the_difference_is_the_real_gain_minus_the_control_gain_paired_by_seed():
    diffs = gain_differences(TABLE, "baseline")
    expect = (np.array(REAL) - FLAT) - (np.array(CTRL) - CTRL_FLAT)
    assert diffs == pytest.approx(dict(zip(SEEDS, expect)))
    claim = gain_beyond_control(TABLE, ["baseline"])
    iv = median_interval(expect)  # 6 seeds: [min, max], 96.9 %
    assert claim.value == pytest.approx(iv.low) and claim.holds and claim.verdict == "holds"
    assert claim.interval == pytest.approx([iv.low, iv.high]) and claim.judged_by == ENGINE
    boot = bootstrap_interval(expect)  # the description in the details
    assert difference_interval(TABLE, "baseline") == pytest.approx({"mean": boot.mean, "low": boot.low, "high": boot.high,
                                                                    "n": 6})


def test_a_control_that_gains_like_the_real_arm_makes_it_fail():
    both_shuffled = pd.concat([arm("baseline", CTRL), arm("no-anneal", CTRL_FLAT), arm("baseline|control", CTRL),
                               arm("no-anneal|control", CTRL_FLAT)])
    claim = gain_beyond_control(both_shuffled, ["baseline"])
    assert claim.verdict == "fails" and claim.value == pytest.approx(0.0)  # every difference 0: the interval is [0, 0]
    # half the seeds above, half below: the interval straddles 0
    mixed = pd.concat([arm("baseline", [0.9, 0.5] * 3), arm("no-anneal", [0.5] * 6),
                       arm("baseline|control", [0.5, 0.9] * 3), arm("no-anneal|control", [0.5] * 6)])
    straddles = gain_beyond_control(mixed, ["baseline"])
    assert straddles.verdict == "inconclusive" and straddles.value < 0 and "straddles" in straddles.reason


def test_cells_pool_their_seed_pairs_and_missing_arms_give_no_claim():
    cells = pd.concat([TABLE.assign(variant=TABLE["variant"].str.replace("baseline", "d=20").str.replace("no-anneal", "d=20|no-anneal")),
                       TABLE.assign(variant=TABLE["variant"].str.replace("baseline", "d=30").str.replace("no-anneal", "d=30|no-anneal"))])
    pooled = gain_beyond_control(cells, ["d=20", "d=30"])
    assert pooled is not None and "12 (group, seed) pairs" in pooled.evidence and pooled.verdict == "holds"
    assert gain_beyond_control(arm("baseline", REAL), ["baseline"]) is None  # no twin, no controls: nothing to claim
    one = pd.concat([arm("baseline", REAL[:1], [0]), arm("no-anneal", FLAT[:1], [0]), arm("baseline|control", CTRL[:1], [0]),
                     arm("no-anneal|control", CTRL_FLAT[:1], [0])])
    few = gain_beyond_control(one, ["baseline"])
    assert few.verdict == "inconclusive" and few.reason == "inconclusive (1 of 6 seeds)"
