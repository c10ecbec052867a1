"""Floors as the lowest objective found over declared starts (floor_starts.py, floor_tables.floor_tables,
floor_claims.gate_by_floor): the starts are seeded and distinct, the floors row is the argmin
of J over the converged starts of the floor_starts table, a run's floors are `stagewise
floors`', a threshold is not testable only below every start's floor, old floors tables still
read, and the new config field keeps every old config hash."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from runcache import smoke_spec
from stagewise.config import canonical, config_hash, resolve
from stagewise.labs import get_lab
from stagewise.labs.disentangled.claims import stage_claims
from stagewise.labs.disentangled.config import FLOOR_STARTS, Config, ExperimentConfig
from stagewise.labs.disentangled.floor_claims import FLOOR_REASON, SeedFloors, relative_claims, with_floors
from stagewise.labs.disentangled.floor_starts import TIE_REL, aligned_scales, start_weights
from stagewise.labs.disentangled.floor_tables import floor_tables, floors_report
from stagewise.labs.disentangled.floors import solve
from stagewise.labs.disentangled.train import build_ensemble, init_weights, members_from_config

LAB = get_lab("disentangled")
LOG2 = math.log(2.0)
SMALL = {"n_seeds": 2, "data": {"d": 8, "prompt_len": 6, "n_train": 40, "n_test": 60}}
"""Small floor problems (a solve is well under a second)."""
SCALE_RTOL = 0.3  # the norms of two N(0, s^2) draws of 2 x 64 entries agree to ~6 % (one std); 0.3 is five of them
SAME = 1e-12  # values that must agree to round-off
COVARIANT_RTOL = 1e-9  # the aligned start's margins are brentq roots (to ~1e-15), its kappas float64 means


def config(**over) -> Config:
    return resolve(Config, {**SMALL, **over})


def weights_of(cfg: Config, start: str) -> torch.Tensor:
    """Every member's start ``start`` (S, B, k, k), from a fresh ensemble (its signal directions)."""
    members = members_from_config(cfg)
    ens = build_ensemble(cfg, members)
    return start_weights(cfg, members, [start] * len(members), ens)


@pytest.mark.parametrize("weights", ["block", "full"])
def test_the_starts_are_seeded_distinct_and_what_they_claim(weights):
    cfg = config(model={"weights": weights})
    members = members_from_config(cfg)
    drawn = {s: weights_of(cfg, s) for s in FLOOR_STARTS}
    for start, x in drawn.items():  # deterministic: the seed alone decides
        assert torch.equal(x, weights_of(cfg, start)), start
    for a in FLOOR_STARTS:  # distinct: every pair differs, for every member
        for b in FLOOR_STARTS[FLOOR_STARTS.index(a) + 1:]:
            assert all(not torch.allclose(drawn[a][i], drawn[b][i]) for i in range(len(members))), (a, b)
    init = torch.stack(init_weights(cfg, members, torch.float64), 1)
    assert torch.equal(drawn["init"], init)  # the member's own initial weights
    for i in range(len(members)):  # small: the init's scale, another draw
        assert drawn["small"][i].norm() == pytest.approx(float(init[i].norm()), rel=SCALE_RTOL)
        assert drawn["large"][i].norm() == pytest.approx(float(drawn["aligned"][i].norm()), rel=SAME)  # large: aligned's norm
    ens = build_ensemble(cfg, members)
    d = cfg.data.d
    scales = aligned_scales(cfg, members, ens.train, ens.w_star, ens.zeta_basis)  # (S, 2)
    for i in range(len(members)):  # aligned: b w* w*^T and a (u1 u1^T + u2 u2^T), block-diagonal when full
        b, a = scales[i].tolist()
        assert b > 0 and a > 0
        x = drawn["aligned"][i]
        w, v = (x[0], x[1]) if weights == "block" else (x[0, :d, :d], x[0, d:, d:])
        assert torch.allclose(w, b * torch.outer(ens.w_star[i], ens.w_star[i]), atol=SAME)
        assert torch.allclose(v, a * ens.zeta_basis[i].T @ ens.zeta_basis[i], atol=SAME)
        if weights == "full":
            assert x[0, :d, d:].abs().max() == 0 and x[0, d:, :d].abs().max() == 0


def test_every_start_is_scale_covariant_like_the_problem():
    """Features times c with lambda times c^4 is the same floor problem with W -> W / c^2
    (test_floors_inputs.py); every start follows (the init scale given as init_scale / c^2)."""
    c = 10.0
    unit = {**SMALL["data"], "gamma0": 1.0, "p_noise": 0.3, "zeta": 0.7, "q_noise": 0.05}
    scaled = {**unit, **{k: unit[k] * c for k in ("gamma0", "p_noise", "zeta", "q_noise")}}
    one = config(data=unit, train={"l2": 1e-3})
    big = config(data=scaled, train={"l2": 1e-3 * c ** 4}, model={"init_scale": one.model.init_scale / c ** 2})
    for start in FLOOR_STARTS:
        assert torch.allclose(weights_of(big, start) * c ** 2, weights_of(one, start), rtol=COVARIANT_RTOL, atol=0), start


def test_the_floors_row_is_the_argmin_of_j_over_the_converged_starts():
    cfg = config(n_seeds=1)
    members = members_from_config(cfg) + members_from_config(cfg, control=True)  # the control: outside the fixed point's family
    tables = floor_tables(cfg, members)
    starts = pd.DataFrame(tables.start_rows)
    assert len(starts) == len(members) * len(FLOOR_STARTS)
    for i, row in enumerate(tables.rows):
        mine = starts.iloc[i * len(FLOOR_STARTS):(i + 1) * len(FLOOR_STARTS)]
        assert list(mine["start"]) == list(FLOOR_STARTS) and set(mine["seed"]) == {row["seed"]}
        pool = mine[mine["converged"]]
        assert len(pool) and row["converged"] and row["starts"] == len(mine)
        assert row["J"] <= pool["J"].min() + TIE_REL * abs(pool["J"].min())  # the lowest objective found
        chosen = mine[mine["start"] == row["start"]].iloc[0]
        assert all(row[k] == chosen[k] for k in ("J", "K1", "K2", "m_P", "m_Q", "grad_norm", "iterations"))
        earlier = mine.iloc[:list(mine["start"]).index(row["start"])]  # ties go to the earlier start
        assert (earlier["J"] >= row["J"] - TIE_REL * abs(row["J"])).all() or not earlier["converged"].any()
        assert row["J.spread"] == pool["J"].max() - pool["J"].min()
        for k in ("K1", "K2"):
            assert (row[f"{k}.min"], row[f"{k}.max"]) == (pool[k].min(), pool[k].max())
    for i, member in enumerate(members):  # the init start is the single-start solve of before (golden floors keep their meaning)
        assert abs(starts.iloc[i * len(FLOOR_STARTS)]["J"] - solve(cfg, [member])[0].objective) <= SAME


def test_one_start_is_the_single_start_floor_and_the_field_is_validated():
    cfg = config(experiment={"floor_starts": ["init"]})
    rows = floor_tables(cfg, members_from_config(cfg)).rows
    assert all(r["start"] == "init" and r["starts"] == 1 and r["J.spread"] == 0 for r in rows)
    assert config(experiment={"floor_starts": ["large", "init"]}).experiment.floor_starts == ["init", "large"]
    from stagewise.errors import UserError

    for bad, needle in ((["init", "nope"], "allowed: init, small, aligned, large"), ([], "at least one start")):
        with pytest.raises(UserError, match=needle) as err:
            config(experiment={"floor_starts": bad})
        assert len(err.value.messages) == 1 and "\n" not in err.value.messages[0]


def test_a_runs_floors_are_stagewise_floors(run_cache):
    """The smoke run's floors (baseline members) and floor_starts tables equal `stagewise floors`' for its first seed."""
    folder = run_cache.path(smoke_spec("disentangled"))
    cfg = resolve(Config, {**LAB.smoke, "n_seeds": 1})
    run = pd.read_parquet(folder / "tables" / "floors.parquet").set_index(["variant", "seed"]).loc[""]  # a one-variant run
    run_starts = pd.read_parquet(folder / "tables" / "floor_starts.parquet")
    report = floors_report(cfg)
    assert "lowest found over 4 starts" in report.text()[-1]
    for row in report.rows:
        for key in ("J", "K1", "K2", "m_P", "m_Q", "start", "J.spread", "K1.min", "K2.max"):
            assert run.loc[row["seed"], key] == row[key], key
    base = run_starts[run_starts["variant"] == ""]
    assert len(run_starts) == 2 * len(base) == 2 * LAB.smoke["n_seeds"] * len(FLOOR_STARTS)  # the controls' starts beside


# --- verdicts ------------------------------------------------------------------------------------------------------
SEEDS = [0, 1]


def stages_table(k2_end: float) -> pd.DataFrame:
    """Stage rows of two seeds: P learned, K2 flat at t1 and ``k2_end`` at the end."""
    return pd.DataFrame([{"group": "g", "variant": "", "seed": s, "stage": stage, "step": step, "test.K1.p_queries": 0.1,
                          "test.K2.q_queries": k2, "test.acc.p_only": 1.0, "test.acc.q_part": 0.9}
                         for s in SEEDS for stage, step, k2 in (("stage1", 300, 0.69), ("stage2", 6000, k2_end))])


def floors_table(k2: float, k2_min: float | None, k2_max: float | None = None) -> pd.DataFrame:
    """Hand-made floors of two seeds; without ``k2_min`` a table from before the starts."""
    table = pd.DataFrame({"variant": "", "seed": SEEDS, "K1": 0.1, "K2": k2, "analytic.K1": 0.1, "analytic.K2": k2})
    if k2_min is not None:
        table = table.assign(**{"K1.min": 0.1, "K1.max": 0.1, "K2.min": k2_min, "K2.max": k2_max or k2, "starts": 4,
                                "start": "small", "J.spread": 0.01})
    return table


def q_learned(floors: pd.DataFrame, k2_end: float = 0.5):
    cfg = resolve(Config, {"n_seeds": len(SEEDS)})
    stages = stages_table(k2_end)
    return {c.id: c for c in with_floors(cfg, stage_claims(cfg, stages), stages, floors)}["q_learned_stage2"]


def test_not_testable_only_below_every_starts_floor():
    threshold = resolve(Config, {}).thresholds.q_loss * LOG2
    above, below = threshold + 0.05, threshold - 0.05
    # the lowest-objective start's K2* is above the threshold, another start's below: the threshold is reachable, judged
    split = q_learned(floors_table(above, below, above))
    assert split.verdict != "not testable" and "lowest objective of 4 starts" in split.floor
    # every start's floor above: not testable, worded over the starts
    every = q_learned(floors_table(above, above + 0.01, above + 0.02))
    assert every.verdict == "not testable" and every.reason.startswith(FLOOR_REASON[0])
    assert f"K2* = {above:.3f} (lowest objective of 4 starts; K2* over starts {above + 0.01:.3f}..{above + 0.02:.3f}" in every.reason
    assert "every start" in every.reason


def test_an_old_floors_table_without_the_starts_still_reads():
    threshold = resolve(Config, {}).thresholds.q_loss * LOG2
    old = floors_table(threshold + 0.05, None)
    claim = q_learned(old)
    assert claim.verdict == "not testable" and claim.reason.startswith(FLOOR_REASON[1])
    k2 = f"{threshold + 0.05:.3f}"
    assert f"below the attainable floor K2* = {k2} ({k2}..{k2} over 2 seeds" in claim.reason
    floors = SeedFloors.of(old, "", SEEDS)
    assert floors.starts is None and np.array_equal(floors.lowest("K2"), floors.k2)
    assert not q_learned(floors_table(threshold - 0.05, None)).verdict == "not testable"
    cfg = resolve(Config, {"n_seeds": len(SEEDS)})
    relative = {c.id: c for c in relative_claims(cfg, stages_table(0.5), old)}
    assert relative["q_drop_stage2"].verdict != "not testable"  # relative forms from the K column, as before


def test_relative_claims_use_the_lowest_objective_floor():
    """K* of a relative claim is the table's K column (the lowest-objective start), not K.min."""
    cfg = resolve(Config, {"n_seeds": len(SEEDS)})
    stages = stages_table(0.5)
    one, spread = floors_table(0.4, 0.4, 0.4), floors_table(0.4, 0.2, 0.6)
    for a, b in zip(relative_claims(cfg, stages, one), relative_claims(cfg, stages, spread)):
        assert a.id == b.id and a.verdict == b.verdict and a.per_seed == b.per_seed and a.value == b.value


def test_the_new_field_keeps_every_config_hash(monkeypatch):
    """experiment.floor_starts at its default is left out of the hash: the hash equals the one of
    the config's dict with the field taken out (what a config made before it hashed), a dict
    without the field (an old config.yaml) reads as the default; away from it the hash changes."""
    cfg = resolve(Config, {})
    with monkeypatch.context() as patch:  # the canonical form as if the field were an ordinary one
        patch.setattr(ExperimentConfig, "ADDED", tuple(n for n in ExperimentConfig.ADDED if n != "floor_starts"))
        with_field = canonical(cfg)
    assert with_field["experiment"].pop("floor_starts") == list(FLOOR_STARTS)
    blob = json.dumps(with_field, sort_keys=True, separators=(",", ":"))
    assert hashlib.sha256(blob.encode()).hexdigest()[:16] == config_hash(cfg)
    old = cfg.model_dump(mode="json")
    old["experiment"].pop("floor_starts")
    assert Config.model_validate(old).experiment.floor_starts == list(FLOOR_STARTS)
    assert config_hash(resolve(Config, {"experiment": {"floor_starts": ["init"]}})) != config_hash(cfg)
