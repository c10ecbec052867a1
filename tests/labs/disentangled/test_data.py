"""Tests of the disentangled lab's prompts: shapes, seeding, geometry, mixture, validation."""

from __future__ import annotations

import math

import pytest
import torch

from stagewise.errors import UserError
from stagewise.labs.disentangled.data import (
    DataSpec,
    Prompts,
    sample_prompts,
    validate_spec,
)

SMALL = DataSpec(d=8, prompt_len=6)


def fields(p: Prompts) -> dict[str, torch.Tensor]:
    return {"x1": p.x1, "x2": p.x2, "y": p.y, "kind": p.kind, "w_star": p.w_star, "zeta": p.zeta}


def assert_same(a: Prompts, b: Prompts) -> None:
    for name, value in fields(a).items():
        assert torch.equal(value, fields(b)[name]), name


def best_threshold_accuracy(proj: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Best accuracy of sign(s * proj + b) over thresholds b and signs s, per direction.

    proj: (U, M) projections onto U directions, y: (M,) labels -> (U,).
    """
    order = proj.argsort(dim=-1)  # (U, M)
    ys = y[order]  # (U, M) labels in projection order
    neg_below = torch.cat([torch.zeros_like(ys[:, :1]), (ys < 0).double().cumsum(-1)], -1)  # (U, M+1)
    pos_above = (ys > 0).sum(-1, keepdim=True) - torch.cat(
        [torch.zeros_like(ys[:, :1]), (ys > 0).double().cumsum(-1)], -1)  # (U, M+1)
    acc = (neg_below + pos_above) / y.numel()  # (U, M+1) predict -1 below the cut, +1 above
    return torch.maximum(acc.max(-1).values, (1 - acc).max(-1).values)


# --- shapes, dtypes, seeding ------------------------------------------------------------


def test_shapes_and_dtypes():
    p = sample_prompts(SMALL, [0, 1, 2], n=5, split="train")
    assert p.x1.shape == p.x2.shape == (3, 5, 6, 8)
    assert p.y.shape == p.kind.shape == (3, 5, 6)
    assert p.w_star.shape == (3, 8) and p.zeta.shape == (3, 2, 8)
    assert p.x1.dtype == p.x2.dtype == p.y.dtype == p.w_star.dtype == p.zeta.dtype == torch.float64
    assert p.kind.dtype == torch.long
    assert set(p.y.unique().tolist()) <= {-1.0, 1.0} and set(p.kind.unique().tolist()) <= {0, 1, 2}
    q = sample_prompts(SMALL, [0, 1, 2], n=5, split="train", dtype=torch.float32)
    assert q.x1.dtype == q.y.dtype == q.zeta.dtype == torch.float32
    assert torch.allclose(q.x1.double(), p.x1, atol=1e-6) and torch.equal(q.kind, p.kind)


def test_deterministic_in_seed_and_split():
    a = sample_prompts(SMALL, [3, 4], n=7, split="train")
    assert_same(a, sample_prompts(SMALL, [3, 4], n=7, split="train"))
    other = sample_prompts(SMALL, [5, 6], n=7, split="train")
    assert not torch.equal(a.x1, other.x1)
    test = sample_prompts(SMALL, [3, 4], n=7, split="test")
    assert not torch.equal(a.x1, test.x1)
    # train and test of a seed share the geometry
    assert torch.equal(a.w_star, test.w_star) and torch.equal(a.zeta, test.zeta)


def test_member_equals_single_seed_call_and_repeated_seed():
    spec = DataSpec(d=5, prompt_len=4, q_geometry="xor", w_star="random")
    batch = sample_prompts(spec, [10, 11, 10], n=9, split="test")
    for i, seed in enumerate([10, 11, 10]):
        single = sample_prompts(spec, [seed], n=9, split="test")
        for name, value in fields(batch).items():
            assert torch.equal(value[i], fields(single)[name][0]), (seed, name)
    for name, value in fields(batch).items():
        assert torch.equal(value[0], value[2]), name


def test_geometry():
    p = sample_prompts(DataSpec(d=6, w_star="random", zeta=0.3), [0, 1], n=1, split="train")
    assert torch.allclose(p.w_star.norm(dim=-1), torch.ones(2, dtype=torch.float64))
    assert not torch.allclose(p.w_star[0], p.w_star[1])
    gram = p.zeta @ p.zeta.transpose(1, 2)  # (S, 2, 2)
    assert torch.allclose(gram, 0.09 * torch.eye(2, dtype=torch.float64).expand(2, 2, 2), atol=1e-12)
    e1 = sample_prompts(DataSpec(d=6), [0], n=1, split="train").w_star[0]
    assert torch.equal(e1, torch.eye(6, dtype=torch.float64)[0])
    one = sample_prompts(DataSpec(d=1), [0], n=3, split="train")
    assert one.zeta[0, 0].abs().item() == pytest.approx(0.5)


# --- P, Q and the mixture ---------------------------------------------------------------


def test_p_margin_and_linear_separability():
    spec = DataSpec(d=10, prompt_len=8, gamma0=0.7)
    p = sample_prompts(spec, [0, 1], n=200, split="train")
    score = torch.einsum("snld,sd->snl", p.x1, p.w_star)  # (S, N, L)
    has_p = p.kind != 2
    assert (p.y * score)[has_p].min() >= 0.7 - 1e-12
    assert torch.equal(torch.sign(score)[has_p], p.y[has_p])


def test_mixture_zeros_and_frequencies():
    spec = DataSpec(d=4, prompt_len=10, p0=0.3, q0=0.15)
    p = sample_prompts(spec, [0], n=4000, split="train")
    assert (p.x1[p.kind == 2] == 0).all() and (p.x2[p.kind == 1] == 0).all()
    assert (p.x1[p.kind != 2].norm(dim=-1) > 0).all() and (p.x2[p.kind != 1].norm(dim=-1) > 0).all()
    for k, expected in ((1, 0.3), (2, 0.15), (0, 0.55)):
        assert abs((p.kind == k).double().mean().item() - expected) < 0.02
    query_kind = p.kind[..., -1]  # the mixture applies to the query too
    assert abs((query_kind == 1).double().mean().item() - 0.3) < 0.04
    assert abs((p.y > 0).double().mean().item() - 0.5) < 0.02


def test_three_cluster_means():
    spec = DataSpec(d=6, prompt_len=10, zeta=0.5, q_noise=0.05)
    p = sample_prompts(spec, [0], n=1000, split="train")
    has_q = p.kind != 1
    plus, minus = p.x2[has_q & (p.y > 0)], p.x2[has_q & (p.y < 0)]  # (M, d)
    assert plus.mean(0).norm() < 0.01
    along = minus @ p.zeta[0, 0]  # (M,)
    assert along.abs().mean().item() == pytest.approx(0.25, abs=0.01)
    assert abs((along > 0).double().mean().item() - 0.5) < 0.03  # both outer clusters used


def test_xor_labels_follow_nearest_direction():
    spec = DataSpec(d=5, prompt_len=10, q_geometry="xor", zeta=0.5, q_noise=0.05)
    p = sample_prompts(spec, [0, 1], n=300, split="train")
    proj = torch.einsum("snld,skd->snlk", p.x2, p.zeta).abs()  # (S, N, L, 2)
    predicted = torch.where(proj[..., 0] > proj[..., 1], 1.0, -1.0).double()  # (S, N, L)
    has_q = p.kind != 1
    assert torch.equal(predicted[has_q], p.y[has_q])


def test_three_cluster_q_not_linearly_separable():
    spec = DataSpec(d=6, prompt_len=10, p0=0.0, q0=1.0)  # Q-only tokens
    p = sample_prompts(spec, [0], n=300, split="train")
    x2, y = p.x2[0].reshape(-1, 6), p.y[0].reshape(-1)  # (M, d), (M,)
    gen = torch.Generator().manual_seed(0)
    dirs = torch.cat([p.zeta[0, :1], torch.randn(300, 6, generator=gen, dtype=torch.float64)])  # (U, d)
    acc = best_threshold_accuracy(dirs @ x2.T, y)  # (U,)
    assert acc.max().item() < 0.82  # best is about 0.75 (middle + one outer cluster)
    assert acc[0].item() > 0.7  # zeta1 itself reaches that
    both = sample_prompts(DataSpec(d=6, prompt_len=10, p0=0.0, q0=0.0), [0], n=300, split="train")
    p_acc = best_threshold_accuracy((both.x1[0].reshape(-1, 6) @ both.w_star[0])[None], both.y[0].reshape(-1))
    assert p_acc.item() == 1.0  # while P is separated by w* with no error


# --- validation -------------------------------------------------------------------------


def test_default_spec_is_valid():
    validate_spec(DataSpec())
    validate_spec(DataSpec(q_geometry="xor", p_noise=0.0, q_noise=0, p0=0, q0=1))


def test_every_bad_field_reported_together():
    bad = DataSpec(d=0, prompt_len=1, p_geometry="curved", q_geometry="ring", p0=1.5, q0=-0.1,
                   gamma0=0.0, p_noise=-1.0, q_noise=math.inf, zeta=0.0, w_star="e2")
    with pytest.raises(UserError) as info:
        validate_spec(bad)
    msgs = info.value.messages
    keys = ["data.d=", "data.prompt_len=", "data.p_geometry=", "data.q_geometry=", "data.p0=",
            "data.q0=", "data.gamma0=", "data.p_noise=", "data.q_noise=", "data.zeta=", "data.w_star="]
    for key in keys:
        assert sum(m.startswith(key) for m in msgs) == 1, key
    assert len(msgs) == len(keys) and all("\n" not in m for m in msgs)
    assert any("three-cluster, xor" in m for m in msgs) and any("e1, random" in m for m in msgs)
    assert any("margin" in m for m in msgs if m.startswith("data.p_geometry="))


def test_pair_constraints_and_sampling_arguments():
    with pytest.raises(UserError, match=r"data.p0 \+ data.q0 = 1.1"):
        validate_spec(DataSpec(p0=0.6, q0=0.5))
    with pytest.raises(UserError, match="xor.*data.d >= 2"):
        validate_spec(DataSpec(d=1, q_geometry="xor"))
    with pytest.raises(UserError) as info:
        sample_prompts(DataSpec(zeta=-1.0), [], n=0, split="val")
    msgs = info.value.messages
    assert len(msgs) == 4 and msgs[0].startswith("data.zeta=")
    assert any(m.startswith("n=0") for m in msgs) and any("train, test" in m for m in msgs)
