"""Tests of the NTP model and trainer (stagewise.labs.ntp.model / train).

Ground truth used here: torch.autograd for the closed-form gradients, exact invariances
(padding, rotation of the embeddings, extra embedding dimensions, ensemble == loop of
single runs), the exact stage-1 dynamics under zero init (spec section 5) and a few golden
losses of a tiny seeded run. Everything runs in float64 on small problems (a few seconds).
"""

from __future__ import annotations

import math

import pytest
import torch

from stagewise.labs.ntp.config import Config
from stagewise.labs.ntp.model import TokenBatch, collocation_loss, forward, gradients, token_matrices
from stagewise.labs.ntp.problem import Problem, build_problem
from stagewise.runs import MemoryContext
from stagewise.labs.ntp.train import Params, evaluate, init_params, metrics, train_two_stage


def make_config(**sections) -> Config:
    """Config from nested dicts, e.g. make_config(seed=1, data={"vocab_size": 6})."""
    return Config.model_validate(sections)


def run_logged(config: Config) -> tuple[Params, MemoryContext, Problem]:
    problem = build_problem(config)
    recorder = MemoryContext()
    params = train_two_stage(config, problem, recorder)
    return params, recorder, problem


def assert_rel_close(actual: torch.Tensor, expected: torch.Tensor, rtol: float, what: str = "") -> None:
    """max |actual - expected| <= rtol * max(|expected|, tiny), elementwise over the whole tensor."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    scale = expected.abs().max().clamp_min(1e-300)
    err = (actual - expected).abs().max()
    assert err <= rtol * scale, f"{what}: max abs error {err:.3e}, scale {scale:.3e}"


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


def reference_loss(wkq, wov, problem: Problem) -> torch.Tensor:
    """Plain embedding-space model, written independently of the token-space code: (S,) loss."""
    x, query = problem.embedded()  # (S, N, L, d), (S, N, d)
    scores = torch.einsum("snld,sde,sne->snl", x, wkq, query).masked_fill(~problem.batch.mask, float("-inf"))
    attn = torch.softmax(scores, -1)  # (S, N, L)
    logits = torch.einsum("svd,snd->snv", wov, torch.einsum("snl,snld->snd", attn, x))  # (S, N, V)
    ce = torch.logsumexp(logits, -1) - logits.gather(-1, problem.batch.target.unsqueeze(-1)).squeeze(-1)
    return (problem.batch.weight * ce).sum(-1)


def ours(wkq, wov, problem: Problem, batch: TokenBatch | None = None, need_wkq: bool = True, identity: bool = False):
    """(loss, grad W_ov, grad W_kq) from the token-space forward and closed-form gradients.

    ``identity`` uses the shortcut for one-hot embeddings with d = |V| (emb = None)."""
    emb = None if identity else problem.emb
    key, tok = token_matrices(wkq, wov, emb)
    fwd = forward(key, tok, batch or problem.batch)
    g_wov, g_wkq = gradients(fwd, tok, emb, batch or problem.batch, need_wkq)
    return fwd.loss, g_wov, g_wkq


def test_identity_shortcut_equals_general_path():
    config = make_config(seed=1, n_seeds=2, data={"vocab_size": 7}, model={"init": "random", "init_scale": 1.0})
    problem = build_problem(config)
    assert problem.emb_op is None  # one-hot, d = |V|
    assert build_problem(make_config(data={"vocab_size": 7, "embedding": "rotated"})).emb_op is not None
    wkq, wov = init_params(config, problem, torch.float64).merged()
    for a, b in zip(ours(wkq, wov, problem), ours(wkq, wov, problem, identity=True)):
        assert_rel_close(b, a, 1e-14)
    l_a, g_a = collocation_loss(torch.bmm(wov, problem.emb), problem.emb, problem.colloc_onehot)
    l_b, g_b = collocation_loss(wov, None, problem.colloc_onehot)
    assert_rel_close(l_b, l_a, 1e-14)
    assert_rel_close(g_b, g_a, 1e-14)


# --------------------------------------------------------------------------- gradients

GRAD_CASES = [
    pytest.param({"vocab_size": 6}, id="onehot"),
    pytest.param({"vocab_size": 6, "embedding": "rotated"}, id="rotated"),
    pytest.param({"vocab_size": 6, "embedding": "gaussian"}, id="gaussian"),
    pytest.param({"vocab_size": 6, "embedding": "gaussian", "dim": 4}, id="gaussian-d<V"),
    pytest.param({"vocab_size": 6, "embedding": "rotated", "dim": 9}, id="rotated-d>V"),
]


@pytest.mark.parametrize("data", GRAD_CASES)
@pytest.mark.parametrize("seed", [0, 3])
def test_closed_form_gradients_match_autograd(data, seed):
    # init_scale 1: attention far from uniform, so the softmax backward is really exercised
    config = make_config(seed=seed, n_seeds=3, data=data, model={"init": "random", "init_scale": 1.0})
    problem = build_problem(config)
    params = init_params(config, problem, torch.float64)
    wkq, wov = (_leaf(t) for t in params.merged())

    loss, g_wov, g_wkq = ours(wkq.detach(), wov.detach(), problem)
    ref = reference_loss(wkq, wov, problem)
    assert_rel_close(loss, ref.detach(), 1e-13, "loss")
    auto_wkq, auto_wov = torch.autograd.grad(ref.sum(), [wkq, wov])  # members are independent
    assert_rel_close(g_wov, auto_wov, 1e-12, "grad W_ov")
    assert_rel_close(g_wkq, auto_wkq, 1e-12, "grad W_kq")
    _, g_only_wov, none = ours(wkq.detach(), wov.detach(), problem, need_wkq=False)
    assert none is None
    assert_rel_close(g_only_wov, auto_wov, 1e-12, "grad W_ov (need_wkq=False)")

    loss0, g0 = collocation_loss(torch.bmm(wov, problem.emb), problem.emb, problem.colloc_onehot)
    (auto_g0,) = torch.autograd.grad(loss0.sum(), [wov])
    assert_rel_close(g0, auto_g0, 1e-12, "grad L0")


def test_forward_matches_plain_per_sample_loop():
    """The batched loss equals a per-member, per-sample computation with plain torch ops."""
    config = make_config(seed=2, n_seeds=2, data={"vocab_size": 6, "embedding": "gaussian"},
                         model={"init": "random", "init_scale": 1.0})
    problem = build_problem(config)
    wkq, wov = init_params(config, problem, torch.float64).merged()
    loss = ours(wkq, wov, problem)[0]
    for s in range(problem.n_members):
        ds, tok = problem.datasets[s], problem.emb[s]  # tok (d, V)
        total = torch.zeros((), dtype=torch.float64)
        for sample, pi in zip(ds.samples, ds.weights):
            X = tok[:, list(sample.input)]  # (d, L)
            attn = torch.softmax(X.T @ wkq[s] @ X[:, -1], dim=0)  # (L,)
            logits = wov[s] @ (X @ attn)  # (V,)
            total = total + pi * (torch.logsumexp(logits, 0) - logits[sample.next])
        assert_rel_close(loss[s], total, 1e-12, f"loss of member {s}")
        logits0 = wov[s] @ tok  # (V, V_tokens)
        loss0 = (torch.logsumexp(logits0, 0) - logits0[problem.colloc[s], torch.arange(tok.shape[1])]).mean()
        assert_rel_close(collocation_loss(torch.bmm(wov, problem.emb), problem.emb, problem.colloc_onehot)[0][s], loss0, 1e-12, "L0")


@pytest.mark.parametrize("seed", [0, 1])
def test_factored_chain_rule_matches_autograd(seed):
    config = make_config(seed=seed, n_seeds=2, data={"vocab_size": 6, "embedding": "rotated"},
                         model={"init": "random", "factored": True, "init_scale": 0.7})
    problem = build_problem(config)
    params = init_params(config, problem, torch.float64)
    assert set(params.tensors) == {"wk", "wq", "wo", "wv"}
    leaves = {k: _leaf(v) for k, v in params.tensors.items()}
    p_auto = Params(leaves, factored=True)
    wkq, wov = p_auto.merged()
    assert_rel_close(wkq, leaves["wk"].transpose(1, 2) @ leaves["wq"], 1e-15, "W_kq = W_k^T W_q")
    names = ["wk", "wq", "wo", "wv"]
    ref = reference_loss(wkq, wov, problem)
    auto = dict(zip(names, torch.autograd.grad(ref.sum(), [leaves[n] for n in names], retain_graph=True)))

    _, g_wov, g_wkq = ours(wkq.detach(), wov.detach(), problem)
    chained = params.chain(g_wkq, g_wov)
    for n in names:
        assert_rel_close(chained[n], auto[n], 1e-12, f"grad {n}")
    # one group at a time, as the two-stage trainer asks
    assert set(params.chain(g_wkq, None)) == {"wk", "wq"}
    assert set(params.chain(None, g_wov)) == {"wo", "wv"}

    loss0, g0 = collocation_loss(torch.bmm(wov, problem.emb), problem.emb, problem.colloc_onehot)
    auto0 = torch.autograd.grad(loss0.sum(), [leaves["wo"], leaves["wv"]])
    chained0 = params.chain(None, g0.detach())
    assert_rel_close(chained0["wo"], auto0[0], 1e-12, "grad0 wo")
    assert_rel_close(chained0["wv"], auto0[1], 1e-12, "grad0 wv")


# --------------------------------------------------------------------------- padding


def _batch_fields(batch: TokenBatch) -> dict[str, torch.Tensor]:
    return {k: getattr(batch, k) for k in ("idx", "mask", "query", "target", "weight")}


def test_padding_in_ensemble_changes_nothing():
    """A member alone equals the same member inside an ensemble padded to a larger member."""
    base = make_config(seed=0, n_seeds=4, data={"vocab_size": 6}, model={"init": "random", "init_scale": 1.0})
    ens = build_problem(base)
    sizes = [len(ds.samples) for ds in ens.datasets]
    s = sizes.index(min(sizes))
    solo_cfg = base.model_copy(update={"seed": base.seed + s, "n_seeds": 1})
    solo = build_problem(solo_cfg)
    n_solo, l_solo = solo.batch.idx.shape[1], solo.batch.idx.shape[2]
    assert n_solo < ens.batch.idx.shape[1], "the chosen member must have padding samples in the ensemble"
    assert torch.equal(solo.batch.idx[0], ens.batch.idx[s, :n_solo, :l_solo])
    assert not ens.batch.weight[s, n_solo:].any() and not ens.batch.mask[s, :, l_solo:].any()

    p_ens = init_params(base, ens, torch.float64)
    p_solo = init_params(solo_cfg, solo, torch.float64)
    for name in p_ens.tensors:
        assert torch.equal(p_ens.tensors[name][s], p_solo.tensors[name][0])

    wkq, wov = p_ens.merged()
    loss_e, gov_e, gkq_e = ours(wkq, wov, ens)
    loss_s, gov_s, gkq_s = ours(wkq[s:s + 1], wov[s:s + 1], solo)
    assert_rel_close(loss_e[s:s + 1], loss_s, 1e-13, "loss")
    assert_rel_close(gov_e[s:s + 1], gov_s, 1e-13, "grad W_ov")
    assert_rel_close(gkq_e[s:s + 1], gkq_s, 1e-13, "grad W_kq")

    # every metric (floor, attention mass, accuracy, generalization suite...) is padding-free too
    ev_e, ev_s = evaluate(p_ens, ens, True), evaluate(p_solo, solo, True)
    m_e, m_s = metrics(p_ens, ens, ev_e, 2, True), metrics(p_solo, solo, ev_s, 2, True)
    for name in m_s:
        assert_rel_close(m_e[name][s:s + 1], m_s[name], 1e-12, f"metric {name}")


def test_extra_padding_samples_and_positions_are_inert():
    """Zero-weight samples with arbitrary content and masked positions do not enter the loss."""
    config = make_config(seed=5, data={"vocab_size": 6}, model={"init": "random", "init_scale": 1.0})
    problem = build_problem(config)
    wkq, wov = init_params(config, problem, torch.float64).merged()
    t = _batch_fields(problem.batch)
    _, N, L = t["idx"].shape
    V = problem.emb.shape[2]
    gen = torch.Generator().manual_seed(0)
    extra_n, extra_l = 5, 3
    idx = torch.randint(0, V, (1, N + extra_n, L + extra_l), generator=gen)  # random tokens everywhere
    idx[:, :N, :L] = t["idx"]
    mask = torch.zeros(1, N + extra_n, L + extra_l, dtype=torch.bool)
    mask[:, :N, :L] = t["mask"]
    mask[:, N:, :2] = True
    padded = TokenBatch.build(
        idx, mask,
        torch.cat([t["query"], torch.randint(0, V, (1, extra_n), generator=gen)], 1),
        torch.cat([t["target"], torch.ones(1, extra_n, dtype=torch.long)], 1),
        torch.cat([t["weight"], torch.zeros(1, extra_n, dtype=torch.float64)], 1), V,
    )
    ref, pad = ours(wkq, wov, problem), ours(wkq, wov, problem, padded)
    for name, a, b in zip(("loss", "grad W_ov", "grad W_kq"), pad, ref):
        assert torch.isfinite(a).all(), name
        assert_rel_close(a, b, 1e-13, name)


# --------------------------------------------------------------------------- ensemble == loop


@pytest.mark.parametrize("train_cfg", [
    pytest.param({}, id="normalized_gd"),
    pytest.param({"optimizer": "adam"}, id="adam"),
    pytest.param({"algorithm": "joint"}, id="joint"),
])
def test_ensemble_equals_loop_of_single_runs(train_cfg):
    tc = {"steps_stage1": 30, "steps_stage2": 60, **train_cfg}
    base = make_config(seed=7, n_seeds=4, data={"vocab_size": 8}, model={"init": "random"}, train=tc)
    batched = train_two_stage(base, build_problem(base))
    for i in range(base.n_seeds):
        single_cfg = base.model_copy(update={"seed": base.seed + i, "n_seeds": 1})
        single = train_two_stage(single_cfg, build_problem(single_cfg))
        for name, value in single.tensors.items():
            assert_rel_close(batched.tensors[name][i], value[0], 1e-10, f"member {i} {name}")


# --------------------------------------------------------------------------- stage 1, zero init


def test_zero_init_stage1_is_exactly_max_margin_direction():
    """Spec 5: from zero init, W_ov after t stage-1 steps equals t * eta0 * W_ov*/||W_ov*||."""
    eta0 = 0.2 / math.sqrt(4)
    for k in (1, 2, 5):
        config = make_config(data={"source": "example1"}, train={"steps_stage1": k, "steps_stage2": 0})
        problem = build_problem(config)
        assert config.step_sizes(problem.emb.shape[1])[0] == eta0
        _, wov = train_two_stage(config, problem).merged()
        star = problem.wov_star
        cos = (wov * star).sum() / (wov.norm() * star.norm())
        assert abs(cos.item() - 1.0) <= 1e-12, (k, cos.item())
        assert abs(wov.norm().item() - k * eta0) <= 1e-12 * k * eta0, (k, wov.norm().item())
        assert_rel_close(wov, k * eta0 * star / star.norm(), 1e-12, f"W_ov after {k} steps")

    # the same read off the logged metrics, every step of stage 1
    config = make_config(data={"source": "example1"}, train={"steps_stage1": 6, "steps_stage2": 0})
    _, rec, _ = run_logged(config)
    for t in range(1, 7):
        assert abs(rec.records[t]["W_ov.cos_target"][0].item() - 1.0) <= 1e-12
        assert abs(rec.records[t]["W_ov.fro"][0].item() - t * eta0) <= 1e-12 * t * eta0


# --------------------------------------------------------------------------- invariances

# continuous metrics only: train.acc is an argmax over logits that tie exactly under zero init,
# so round-off (which differs between embeddings) legitimately decides it early on
TRAJECTORY_METRICS = ("train.loss.stage1", "train.loss", "train.loss.floor", "W_ov.cos_target", "W_kq.cos_target", "W_ov.fro",
                      "W_kq.fro", "train.opt_attn.min", "train.opt_attn.mean")


def test_rotated_embeddings_give_identical_trajectories():
    train_cfg = {"steps_stage1": 25, "steps_stage2": 40}
    onehot = make_config(seed=4, n_seeds=2, data={"vocab_size": 7}, train=train_cfg)
    rotated = make_config(seed=4, n_seeds=2, data={"vocab_size": 7, "embedding": "rotated"}, train=train_cfg)
    _, rec_a, prob_a = run_logged(onehot)
    _, rec_b, prob_b = run_logged(rotated)
    assert not torch.allclose(prob_a.emb, prob_b.emb)
    assert sorted(rec_a.records) == sorted(rec_b.records) == list(range(66))
    for member in range(2):
        for name in TRAJECTORY_METRICS:
            assert_rel_close(rec_b.series(name, member), rec_a.series(name, member), 1e-9, f"{name}[{member}]")
    assert rec_a.records[65]["W_kq.cos_target"].min() > 0.5  # the run got somewhere


@pytest.mark.parametrize("embedding", ["onehot", "rotated"])
def test_extra_embedding_dimensions_change_nothing(embedding):
    V = 6
    train_cfg = {"steps_stage1": 20, "steps_stage2": 30, "lr_stage1": 0.08, "lr_stage2": 0.03}
    small = make_config(seed=2, data={"vocab_size": V}, train=train_cfg)
    large = make_config(seed=2, data={"vocab_size": V, "dim": V + 3, "embedding": embedding}, train=train_cfg)
    _, rec_a, prob_a = run_logged(small)
    _, rec_b, prob_b = run_logged(large)
    assert prob_b.emb.shape[1:] == (V + 3, V)
    for name in TRAJECTORY_METRICS:
        assert_rel_close(rec_b.series(name), rec_a.series(name), 1e-9, name)


# --------------------------------------------------------------------------- golden values

# Produced once by this file's run_logged on
#   make_config(data={"source": "example1"}, train={"steps_stage1": 5, "steps_stage2": 10})
# (example 1, zero init, eta0 = 0.1, eta = 0.025, float64; torch 2.13.0 CPU) and printed with
# repr(float(rec.records[t][name][0])).
GOLDEN = {  # step: (train.loss.stage1 L0, train.loss L)
    0: (1.3862943611198906, 1.3862943611198906),
    1: (1.3433085864823402, 1.3602901261428597),
    2: (1.300965683106617, 1.3346718234214627),
    10: (1.1779675968305714, 1.2567540527019199),  # stage 2 (W_ov frozen after step 5)
}


def test_golden_losses_example1():
    config = make_config(data={"source": "example1"}, train={"steps_stage1": 5, "steps_stage2": 10})
    _, rec, _ = run_logged(config)
    for step, (l0, loss) in GOLDEN.items():
        assert abs(rec.records[step]["train.loss.stage1"][0].item() - l0) <= 1e-12 * l0, (step, "L0")
        assert abs(rec.records[step]["train.loss"][0].item() - loss) <= 1e-12 * loss, (step, "L")


def test_first_losses_analytic_example1():
    """Zero init gives uniform logits (loss log 4); one stage-1 step gives L0 = log(1 + 3 e^{-c})."""
    config = make_config(data={"source": "example1"}, train={"steps_stage1": 1, "steps_stage2": 0})
    _, rec, problem = run_logged(config)
    assert abs(rec.records[0]["train.loss.stage1"][0].item() - math.log(4)) <= 1e-15
    assert abs(rec.records[0]["train.loss"][0].item() - math.log(4)) <= 1e-15
    # W_ov = eta0 W*/||W*|| with ||W*|| = sqrt(3): the logit margin of every token is c = eta0/sqrt(3)
    c = 0.1 / math.sqrt(3)
    assert abs(rec.records[1]["train.loss.stage1"][0].item() - math.log1p(3 * math.exp(-c))) <= 1e-14
    assert abs(problem.wov_star[0].norm().item() - math.sqrt(3)) <= 1e-14


def test_sum_reduction_same_iterates_for_normalized_gd_scaled_for_gd():
    base = {"seed": 3, "n_seeds": 2, "data": {"vocab_size": 6}, "model": {"init": "random"},
            "train": {"steps_stage1": 15, "steps_stage2": 25}}
    mean_cfg, sum_cfg = make_config(**base), make_config(**{**base, "train": {**base["train"], "loss_reduction": "sum"}})
    a, b = train_two_stage(mean_cfg, build_problem(mean_cfg)), train_two_stage(sum_cfg, build_problem(sum_cfg))
    for name in a.tensors:
        assert_rel_close(b.tensors[name], a.tensors[name], 1e-12, f"normalized GD {name}")
    # plain GD: one stage-1 step of the sum loss is |V| times the mean loss's step
    gd = {**base, "model": {"init": "zero"}, "train": {"steps_stage1": 1, "steps_stage2": 0, "optimizer": "gd", "lr_stage1": 0.1}}
    gd_sum = {**gd, "train": {**gd["train"], "loss_reduction": "sum"}}
    w_mean = train_two_stage(make_config(**gd), build_problem(make_config(**gd))).tensors["wov"]
    w_sum = train_two_stage(make_config(**gd_sum), build_problem(make_config(**gd_sum))).tensors["wov"]
    assert_rel_close(w_sum, 6 * w_mean, 1e-13, "GD sum vs mean")
