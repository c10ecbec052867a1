"""The disentangled lab's mechanisms and per-seed claims: data options (Q centre, composite
labels), the shuffled-label control, noise modes, signal parts, the reviewer's reference
K1, and the claims computed from synthetic stage tables with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from stagewise.config import deep_merge, resolve
from stagewise.errors import UserError
from stagewise.labs.disentangled.claims import LOG2, REVIEW_FLOOR, stage_claims, stage_passes, SeedValues
from stagewise.labs.disentangled.config import Config
from stagewise.labs.disentangled.data import KIND_P_FLIPPED, DataSpec, geometry, sample_prompts, validate_spec
from stagewise.labs.disentangled.metrics import review_metrics, signal_metrics
from stagewise.labs.disentangled.summary import bound_claims
from stagewise.labs.disentangled.ensemble import Member, build_ensemble, control_permutation, members_from_config
from stagewise.labs.disentangled.train import learning_rate, noise_std

SMALL = {"n_seeds": 2, "data": {"d": 6, "prompt_len": 6, "n_train": 40, "n_test": 60},
         "train": {"steps": 40, "t1": 15, "log_every": 5, "spectrum_every": 10}}


def small(**over) -> Config:
    return resolve(Config, deep_merge(SMALL, over))


def test_q_centre_is_orthogonal_and_leaves_other_draws_alone():
    base = DataSpec(d=8, q_geometry="xor")
    centred = DataSpec(d=8, q_geometry="xor", q_centre=3.0)
    a = sample_prompts(base, [5], 30, "train")
    b = sample_prompts(centred, [5], 30, "train")
    assert torch.equal(a.x1, b.x1) and torch.equal(a.y, b.y) and torch.equal(a.zeta, b.zeta)
    shift = (b.x2 - a.x2)[b.kind != 1]  # Q-bearing tokens: x2 moved by the same z
    z = shift[0]
    assert torch.allclose(shift, z.expand_as(shift), atol=1e-12)
    assert abs(float(z.norm()) - 3.0) < 1e-12 and float((b.zeta[0] @ z).abs().max()) < 1e-12
    assert bool(((b.x2 - a.x2)[b.kind == 1] == 0).all())  # P-only tokens carry no Q block, so no centre


def test_composite_labels_flip_p_only():
    spec = DataSpec(d=6, q_geometry="xor", p0=0.0, q0=0.0, label_rule="composite", p_flip=0.25)
    plain = DataSpec(d=6, q_geometry="xor", p0=0.0, q0=0.0)
    pr, ref = sample_prompts(spec, [3], 4000, "train"), sample_prompts(plain, [3], 4000, "train")
    flipped = pr.kind == KIND_P_FLIPPED
    assert abs(float(flipped.double().mean()) - 0.25) < 0.01
    along = (pr.x1 @ pr.w_star[0]) * pr.y  # y x1 . w*: >= gamma0 where P agrees, <= -gamma0 where it is flipped
    assert bool((along[flipped] <= -1.0).all()) and bool((along[~flipped] >= 1.0).all())
    assert torch.equal(pr.x2, ref.x2) and torch.equal(pr.y, ref.y)


@pytest.mark.parametrize("spec,needle", [
    (DataSpec(d=2, q_geometry="xor", q_centre=1.0), "data.q_centre=1.0 needs data.d >= 3"),
    (DataSpec(d=6, p_flip=0.2), "data.p_flip=0.2 needs data.label_rule='composite'"),
    (DataSpec(d=6, label_rule="mixed"), "data.label_rule='mixed': unknown"),
    (DataSpec(d=6, q_centre=-1.0), "data.q_centre=-1.0"),
])
def test_bad_data_options(spec, needle):
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        validate_spec(spec)


def test_control_shuffles_only_the_training_targets():
    config = small()
    base = members_from_config(config)
    ens = build_ensemble(config, base + [Member(**{**m.__dict__, "control": True}) for m in base])
    y, labels = ens.train.target, ens.train.labels  # (M, N), (M, N, C)
    S = config.n_seeds
    assert torch.equal(labels[:S], labels[S:]) and torch.equal(ens.train.ctx[:S], ens.train.ctx[S:])
    for i in range(S):  # a permutation of the same targets, not the same order
        assert torch.equal(y[i].sort().values, y[S + i].sort().values) and not torch.equal(y[i], y[S + i])
    assert torch.equal(ens.test.target[:S], ens.test.target[S:])  # test prompts are not shuffled
    perm = control_permutation(7, 10)  # the control's permutation: its seed's own stream, the same every time
    assert torch.equal(perm, control_permutation(7, 10)) and sorted(perm.tolist()) == list(range(10))


def test_noise_modes():
    config = small(train={"lr_stage1": 1.0, "lr_stage2": 0.1, "t1": 10, "noise": 0.5})
    members = [Member(seed=0, noise=0.5, lr_stage1=1.0, lr_stage2=0.1, t1=10, noise_mode=m) for m in ("lr", "constant", "stage1")]
    ens = build_ensemble(config, members)
    for step, expect in ((5, [0.5, 0.5, 0.5]), (11, [0.05, 0.5, 0.0])):
        lr = learning_rate(config, ens.hyper, step)
        assert torch.allclose(noise_std(ens.hyper, lr, step), torch.tensor(expect, dtype=lr.dtype))


def test_the_stage2_noise_scale_applies_after_t1_in_every_mode_and_not_to_the_no_anneal_twin():
    config = small(train={"lr_stage1": 1.0, "lr_stage2": 0.1, "t1": 10, "noise": 0.5, "noise_stage2": 0.25})
    members = [Member(seed=0, noise=0.5, lr_stage1=1.0, lr_stage2=0.1, t1=10, noise_mode=m, noise_stage2=0.25)
               for m in ("lr", "constant", "stage1")]
    ens = build_ensemble(config, members)
    for step, expect in ((10, [0.5, 0.5, 0.5]), (11, [0.05 * 0.25, 0.5 * 0.25, 0.0])):
        lr = learning_rate(config, ens.hyper, step)
        assert torch.allclose(noise_std(ens.hyper, lr, step), torch.tensor(expect, dtype=lr.dtype))
    from stagewise.labs.disentangled.experiments import ABLATIONS

    member_overrides, _ = ABLATIONS["no-anneal"](config)
    assert member_overrides == {"lr_stage2": 1.0, "noise_stage2": 1.0}  # constant rate AND constant noise after t1


def test_signal_metrics_read_the_projections():
    gen = torch.Generator().manual_seed(0)
    d = 7
    w_star, zeta = geometry(DataSpec(d=d, q_geometry="xor", w_star="random"), [1, 2])
    noise = torch.randn(2, d, d, generator=gen, dtype=torch.float64)
    # noise orthogonal to w* on both sides, and to span zeta on both sides
    pw = torch.eye(d, dtype=torch.float64) - torch.einsum("md,me->mde", w_star, w_star)
    pz = torch.eye(d, dtype=torch.float64) - torch.einsum("mkd,mke->mde", zeta, zeta)
    a = torch.tensor([2.0, -3.0], dtype=torch.float64)
    w = a.view(-1, 1, 1) * torch.einsum("md,me->mde", w_star, w_star) + pw @ noise @ pw
    core = torch.tensor([[[4.0, 0.0], [0.0, 1.0]], [[0.0, 2.0], [0.5, 0.0]]], dtype=torch.float64)
    v = torch.einsum("mkd,mkl,mle->mde", zeta, core, zeta) + pz @ noise @ pz
    out = signal_metrics(w, v, w_star, zeta)
    assert torch.allclose(out["W.signal"], a, atol=1e-12)
    assert torch.allclose(out["V.signal.sv.0"], torch.tensor([4.0, 2.0], dtype=torch.float64), atol=1e-12)
    assert torch.allclose(out["V.signal.sv.1"], torch.tensor([1.0, 0.5], dtype=torch.float64), atol=1e-12)
    assert bool((out["V.signal_share"] < 1).all()) and bool((out["W.signal_share"] > 0).all())


def test_review_reference_is_homogeneous_and_above_the_floor():
    config = small(data={"n_test": 400})
    ens = build_ensemble(config, members_from_config(config))
    d = config.data.d
    for scale in (0.5, 3.0):  # K1_ref does not depend on the trained W; K1_ref_at_norm follows ||W||_F
        w = scale * torch.eye(d, dtype=torch.float64).expand(2, d, d) / math.sqrt(d)
        out = review_metrics((w, torch.zeros_like(w)), ens.w_star, ens.test, "L", d)
        assert bool((out["review.K1_ref"] >= REVIEW_FLOOR).all()) and bool((out["review.K1_ref"] < LOG2).all())
        if scale == 0.5:
            first = out
    assert torch.allclose(first["review.K1_ref"], out["review.K1_ref"])
    assert bool((out["review.K1_ref_at_norm"] < first["review.K1_ref_at_norm"]).all())  # a larger W* fits P better


def _stages(values: dict[str, dict[str, list[float]]], variant: str = "") -> pd.DataFrame:
    """A stages table: values[stage][column] per seed."""
    rows = []
    for stage, cols in values.items():
        n = len(next(iter(cols.values())))
        for i in range(n):
            rows.append({"variant": variant, "seed": i, "stage": stage, "step": 0, **{c: v[i] for c, v in cols.items()}})
    return pd.DataFrame(rows)


def test_per_seed_claims_against_the_control():
    config = small()
    run = _stages({
        "stage1": {"test.K1.p_queries": [0.1, 0.1, 0.5], "test.acc.p_only": [1.0, 1.0, 1.0],
                   "test.K2.q_queries": [0.69, 0.70, 0.69], "test.acc.q_part": [0.55, 0.9, 0.6]},
        "stage2": {"test.K1.p_queries": [0.1, 0.1, 0.1], "test.acc.p_only": [1.0, 1.0, 1.0],
                   "test.K2.q_queries": [0.2, 0.3, 0.5], "test.acc.q_part": [0.95, 0.95, 0.7]}})
    control = _stages({
        "stage1": {"test.K2.q_queries": [0.69] * 3, "test.acc.q_part": [0.4, 0.5, 0.6]},
        "stage2": {"test.K2.q_queries": [0.69] * 3, "test.acc.q_part": [0.4, 0.5, 0.6]}}, "control")
    stages = pd.concat([run, control])
    passes = stage_passes(config, SeedValues.of(stages, ""), SeedValues.of(stages, "control"))
    band = np.quantile(np.abs(np.array([0.4, 0.5, 0.6]) - 0.5), 0.95)  # the control's distance from chance
    assert passes["p_learned_stage1"].tolist() == [True, True, False]  # 0.5 > log 2 / 2
    assert passes["q_not_learned_stage1"].tolist() == [True, False, bool(abs(0.6 - 0.5) <= band)]  # seed 1 is outside the band
    assert passes["q_learned_stage2"].tolist() == [True, True, False]
    claims = {c.id: c for c in stage_claims(config, stages)}
    assert not claims["two_stage_per_seed"].holds and "1/3 seeds pass" in claims["two_stage_per_seed"].evidence
    assert claims["control_not_staged"].holds
    lenient = {c.id: c for c in stage_claims(small(thresholds={"seed_fraction": 0.6}), stages)}
    assert lenient["q_learned_stage2"].holds and not claims["q_learned_stage2"].holds  # 2/3 seeds
    assert claims["q_not_learned_stage1_acc"].per_seed["1"] > 0 > claims["q_not_learned_stage1_acc"].per_seed["0"]  # outside / inside
    alone = {c.id: c for c in stage_claims(config, run)}
    assert alone["q_not_learned_stage1_acc"].holds is None and "control" in alone["q_not_learned_stage1_acc"].reason
    assert alone["q_not_learned_stage1"].holds is True  # the loss part needs no control: K2 within 0.05 log 2 of log 2
    assert "control_not_staged" not in alone


def test_bound_claim_is_a_report_unless_the_range_is_covered():
    def rows(ds, ls, k1):
        return [{"d": d, "L": L, "K1.p_queries_stage1": k} for d, L, k in zip(ds, ls, k1)]

    def verdicts(found):
        return {c.id: c.holds for c in found}

    short = bound_claims(rows([8, 16, 32], [20, 30, 40], [0.3, 0.2, 0.1]))
    assert all(c.holds is None and "report only" in c.reason for c in short) and short[0].value == 0.1
    need = [math.ceil(3 * math.sqrt(d) * math.log(d)) for d in (16, 64, 512)]
    assert verdicts(bound_claims(rows([16, 64, 512], need, [0.3, 0.1, 0.04]))) == \
        {"bound_tends_to_zero": True, "bound_monotone": True}
    at_floor = verdicts(bound_claims(rows([16, 64, 512], need, [0.3, 0.1, 0.31])))  # at the floor, not at 0, and rising
    assert at_floor == {"bound_tends_to_zero": False, "bound_monotone": False}
    assert verdicts(bound_claims(rows([16, 64, 512], need, [0.3, 0.02, 0.025]))) == \
        {"bound_tends_to_zero": True, "bound_monotone": True}  # a rise within MONOTONE_TOL
    assert all(c.holds is None for c in bound_claims(rows([16, 64, 512], [n - 1 for n in need], [0.3, 0.1, 0.04])))  # L too short


def test_data_variants_are_tested_on_their_own_distribution():
    """A grid point with another zeta / q_centre / p_flip is measured on prompts from that
    distribution (the config's mixture, unshuffled targets), equal to a run configured so."""
    config = small(data={"label_rule": "composite"})
    point = members_from_config(config, "x", zeta=1.5, q_centre=2.0, p_flip=0.1, control=True)
    alone = small(data={"label_rule": "composite", "zeta": 1.5, "q_centre": 2.0, "p_flip": 0.1})
    mixed = build_ensemble(config, members_from_config(config) + point)
    ref = build_ensemble(alone, members_from_config(alone))
    S = config.n_seeds
    assert torch.equal(mixed.test.ctx[S:], ref.test.ctx) and torch.equal(mixed.test.target[S:], ref.test.target)
    assert torch.equal(mixed.train.ctx[S:], ref.train.ctx) and not torch.equal(mixed.train.target[S:], ref.train.target)


def test_robustness_groups_and_claims(tmp_path):
    from dataclasses import replace as dc_replace

    from stagewise.labs import get_lab
    from stagewise.labs.disentangled.experiments import groups
    from stagewise.orchestrate import execute, prepare

    config = small(n_seeds=1, experiment={"kind": "robustness", "dims": [4, 6], "seed_blocks": [0, 100]})
    plan = groups(config)
    assert [g.name for g in plan] == ["d=4,seed=0", "d=4,seed=100", "d=6,seed=0", "d=6,seed=100"]
    # the block, its no-anneal twin (the causal accuracy claim), and the two controls
    assert [[m.seed for m in g.members] for g in plan][1] == [100, 100, 100, 100]
    assert [plan[1].variant_of(m) for m in plan[1].members] == ["d=4,seed=100", "d=4,seed=100|no-anneal",
                                                                 "d=4,seed=100|control", "d=4,seed=100|no-anneal|control"]
    assert [m.lr_stage2 for m in plan[1].members] == [config.train.lr_stage2, config.train.lr_stage1] * 2
    lab = dc_replace(get_lab("disentangled"), make_figures=lambda *a, **k: [])
    paths = prepare(lab, config, tmp_path / "rob")
    execute(lab, config, paths, progress=False)
    import json

    summary = json.loads(paths.summary.read_text())
    cells = summary["details"]["robustness"]
    assert set(cells) == {g.name for g in plan} and all(c["seeds"] == [int(n.split("seed=")[1])] for n, c in cells.items())
    claims = {c["id"]: c for c in summary["claims"]}
    for key in ("p_learned_stage1", "q_not_learned_stage1", "q_learned_stage2", "p_kept_stage2"):
        testable = [n for n in cells if key not in cells[n].get("below_floor", {})]  # the rest: under the cell's floor
        fractions = [cells[n]["pass_fraction"][key] for n in testable]
        if testable:
            assert claims[f"robust_{key}"]["holds"] == all(f >= 1.0 for f in fractions)
        else:
            assert claims[f"robust_{key}"]["holds"] is None and "attainable floor" in claims[f"robust_{key}"]["reason"]
    stages = pd.read_parquet(paths.tables / "stages.parquet")
    assert set(stages["variant"]) == {f"{n}{twin}" for n in cells for twin in ("", "|control", "|no-anneal", "|no-anneal|control")}
    for name, cell in cells.items():  # the gain fraction is recomputed from the stage table's Q-part accuracies
        end = stages[stages["stage"] == "stage2"].set_index("variant")["test.acc.q_part"]
        gain = end[name] - end[f"{name}|no-anneal"]
        assert cell["anneal_gain_fraction"] == float(gain >= config.thresholds.anneal_gain)
    gains = [cells[n]["anneal_gain_fraction"] for n in cells]
    assert claims["robust_anneal_gain"]["holds"] == all(f >= 1.0 for f in gains)


def test_noise_mode_ablations_differ_only_where_they_should():
    """Without update noise the noise modes are the same run; with it, anneal-fixed-noise
    equals the baseline up to t1 and noise-off-t1 equals no-anneal up to t1."""
    import torch as th

    from stagewise.labs.disentangled.experiments import groups
    from stagewise.labs.disentangled.train import State, init_weights, run_training

    config = small(n_seeds=1, experiment={"kind": "ablations", "ablations": ["no-anneal", "anneal-fixed-noise", "noise-off-t1"],
                                          "control": False})
    (group,) = groups(config)
    names = [m.variant for m in group.members]
    ens = build_ensemble(config, group.members)
    state = State(list(init_weights(config, group.members, th.float64)))
    seen = {}

    def keep(t, st):
        if t in (config.train.t1, config.train.steps):
            seen[t] = [w.clone() for w in st.weights]

    run_training(ens, state, config.train.steps, keep)
    at_t1, end = seen[config.train.t1], seen[config.train.steps]
    i = {n: names.index(n) for n in names}
    for w in at_t1:
        assert th.equal(w[i["baseline"]], w[i["anneal-fixed-noise"]]) and th.equal(w[i["no-anneal"]], w[i["noise-off-t1"]])
    for w in end:
        assert not th.equal(w[i["baseline"]], w[i["anneal-fixed-noise"]]) and not th.equal(w[i["no-anneal"]], w[i["noise-off-t1"]])
