"""The gate-noise phase map (phasemap.py): its sweep file is the declared grid, a shorter stage 2
is a prefix of a longer run (so one run serves every stage-2 length), and the criteria and their
order are judged as declared on metric tables written by hand."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stagewise.config import deep_merge, resolve
from stagewise.labs import get_lab
from stagewise.labs.disentangled import gate_noise
from stagewise.labs.disentangled.config import Config
from stagewise.labs.disentangled.phasemap import CRITERIA, GRID, SIZE, judge_point, phase_table, run_points, sweep_yaml
from stagewise.orchestrate import execute, prepare
from stagewise.report.runview import read_run

ROOT = Path(__file__).resolve().parents[3]
LAB = get_lab("disentangled")
FAST = dataclasses.replace(LAB, make_figures=lambda *a: [])
LOG2 = math.log(2)


def test_the_committed_sweep_file_is_the_declared_grid():
    assert (ROOT / "examples" / "sweeps" / "gate_noise_phase_map.yaml").read_text() == sweep_yaml()
    points = run_points()
    assert len(points) == math.prod(len(GRID[k]) for k in ("rho", "lr_ratio", "noise_stage2"))
    for p in points:  # each run is the sizing of its rho at the cheaper size, long enough for the longest stage 2
        sized = gate_noise.size(SIZE["d"], SIZE["prompt_len"], SIZE["zeta"], SIZE["radius"], p["rho"], lr_stage2=p["lr_ratio"])
        assert p["set"]["train.l2"] == sized.overrides()["train"]["l2"] and p["set"]["train.t1"] == sized.t1
        assert p["set"]["train.steps"] == sized.t1 + max(GRID["t2_steps"])
        assert sized.stage2_ratio < 1 < sized.stage1_ratio


def _gate_like(steps: int) -> Config:
    """A small noisy two-arm run (with the no-anneal twin and the controls), stage-2 noise scaled."""
    return resolve(Config, deep_merge({"n_seeds": 2, "data": {"d": 6, "prompt_len": 8, "n_train": 30, "n_test": 40},
                                       "train": {"steps": steps, "t1": 10, "log_every": 5, "spectrum_every": 50,
                                                 "noise": 0.2, "noise_stage2": 0.5},
                                       "experiment": {"kind": "ablations", "ablations": ["no-anneal"], "floors": False}}, {}))


def test_a_shorter_stage_2_is_a_prefix_of_a_longer_run(tmp_path):
    frames = {}
    for steps in (25, 45):
        paths = prepare(FAST, _gate_like(steps), tmp_path / str(steps))
        execute(FAST, _gate_like(steps), paths, progress=False)
        frames[steps] = read_run(paths.root).metrics
    short, long = frames[25], frames[45]
    common = long[long["step"].isin(short["step"].unique()) & (long["step"] < 25)]
    merged = common.merge(short[short["step"] < 25], on=["step", "seed", "variant", "metric"], suffixes=("_long", "_short"))
    assert len(merged) == len(common) > 0
    assert np.array_equal(merged["value_long"].to_numpy(), merged["value_short"].to_numpy(), equal_nan=True)


def _metrics(k1_t1, k2_t1, k1_end, k2_end, k2_flat_end, k2_ctrl_end, t1=40, end=440) -> pd.DataFrame:
    rows = []
    for variant, metric, step, values in (("baseline", "test.K1.p_queries", t1, k1_t1), ("baseline", "test.K2.q_queries", t1, k2_t1),
                                          ("baseline", "test.K1.p_queries", end, k1_end), ("baseline", "test.K2.q_queries", end, k2_end),
                                          ("no-anneal", "test.K2.q_queries", end, k2_flat_end),
                                          ("baseline|control", "test.K2.q_queries", end, k2_ctrl_end)):
        rows += [{"step": step, "seed": s, "variant": variant, "metric": f"{variant}/{metric}", "value": v} for s, v in enumerate(values)]
    return pd.DataFrame(rows)


CONFIG = {"train": {"t1": 40, "steps": 840, "lr_stage2": 0.1, "l2": 0.075},
          "thresholds": {"p_loss": 0.5, "q_loss": 0.5, "q_flat": 0.05, "seed_fraction": 1.0}}


def test_the_criteria_and_the_first_failing_one():
    whole = _metrics([0.3] * 4, [0.69] * 4, [0.3] * 4, [0.3] * 4, [0.69] * 4, [0.7] * 4)
    point = judge_point(whole, CONFIG, {"rho": 26}, 400)
    assert point.in_region and point.reason is None and point.levers["t2_times"] == pytest.approx(400 * 0.1 * 0.075)
    # P not learned by t1 in one seed (0.35 > 0.5 log 2 = 0.347): the story breaks there first, whatever follows
    broken = _metrics([0.3, 0.3, 0.3, 0.35], [0.69] * 4, [0.3] * 4, [0.40] * 4, [0.69] * 4, [0.3] * 4)
    point = judge_point(broken, CONFIG, {"rho": 26}, 400)
    assert point.reason == "p_learned" and point.fractions["p_learned"] == 0.75
    assert not point.holds["q_learned"] and not point.holds["control_fails"]
    table = phase_table([point])
    assert list(table[list(CRITERIA)].iloc[0]) == [point.fractions[c] for c in CRITERIA] and table["reason"].iloc[0] == "p_learned"
    with pytest.raises(ValueError, match="after the run"):
        judge_point(whole, CONFIG, {"rho": 26}, 900)
