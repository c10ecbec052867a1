"""Every hand-derived gradient against torch.autograd, in float64 on random inputs.

Extends tests/labs/ntp/test_model.py (closed forms on the lab's own problems) and
tests/labs/disentangled/test_train.py (one ensemble shape per model variant) to random shapes, several
ensemble sizes, random padding masks, random sample weights and shared datasets:

* NTP: ``model.gradients`` (d L / d W_ov, d L / d W_kq) and ``model.collocation_loss``
  (d L0 / d W_ov) through an embedding-space reference written independently of the
  token-space code, for orthonormal, rotated, Gaussian (d < V, d > V) and identity
  embeddings; ``train.Params.chain`` (the factored chain rule W_kq = W_k^T W_q, W_ov = W_o W_v).
* Disentangled: ``model.gradients`` of the (minibatch-weighted) logistic loss for split /
  joint / full weights, the three normalizers, K members per shared dataset; and of both
  ``train.objective`` values (total f, or the sum of the parts' losses "branches").
"""

from __future__ import annotations

import pytest
import torch

from stagewise.labs.disentangled.model import forward as dis_forward
from stagewise.labs.disentangled.model import gradients as dis_gradients
from stagewise.labs.disentangled.model import logistic, make_batch, objective_loss
from stagewise.labs.ntp.model import TokenBatch, collocation_loss, forward, gradients, token_matrices
from stagewise.labs.ntp.train import Params

RTOL = 1e-10  # relative to the largest entry of the autograd gradient; float64 round-off is ~1e-15
DTYPE = torch.float64


def assert_rel_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """max |actual - expected| <= RTOL * max |expected| over the whole tensor."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    scale = expected.abs().max().clamp_min(1e-300)
    err = (actual - expected).abs().max()
    assert err <= RTOL * scale, f"{what}: max abs error {err:.3e}, scale {scale:.3e}"


# --------------------------------------------------------------------------- NTP
def random_token_batch(gen: torch.Generator, S: int, N: int, L: int, V: int) -> TokenBatch:
    """Random sentences of lengths 1..L (padding at the end, index 0), random pi with one
    zero-weight (padding) sample per member when N > 1."""
    lengths = torch.randint(1, L + 1, (S, N), generator=gen)  # (S, N)
    mask = torch.arange(L)[None, None, :] < lengths[..., None]  # (S, N, L)
    idx = torch.randint(0, V, (S, N, L), generator=gen).masked_fill(~mask, 0)  # (S, N, L)
    query = idx.gather(2, (lengths - 1)[..., None]).squeeze(-1)  # (S, N) the last valid token
    target = torch.randint(0, V, (S, N), generator=gen)  # (S, N)
    weight = torch.rand(S, N, generator=gen, dtype=DTYPE) + 0.1  # (S, N)
    if N > 1:
        weight[:, -1] = 0.0
    weight = weight / weight.sum(-1, keepdim=True)
    return TokenBatch.build(idx, mask, query, target, weight, V)


def random_embedding(gen: torch.Generator, kind: str, S: int, d: int, V: int) -> torch.Tensor | None:
    """(S, d, V) token embeddings: one-hot (None, d = V), a random rotation of one-hot, or Gaussian."""
    if kind == "identity":
        return None
    if kind == "rotated":
        q, _ = torch.linalg.qr(torch.randn(S, d, d, generator=gen, dtype=DTYPE))  # (S, d, d)
        return q[:, :, :V]  # (S, d, V) orthonormal columns (d >= V)
    return torch.randn(S, d, V, generator=gen, dtype=DTYPE) / d ** 0.5


def embedding_space_loss(wkq: torch.Tensor, wov: torch.Tensor, emb: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
    """(S,) pi-weighted cross-entropy of the plain model on embedded tokens (no token-space tricks)."""
    x = torch.einsum("sdv,snlv->snld", emb, torch.nn.functional.one_hot(batch.idx, emb.shape[2]).to(DTYPE))  # (S, N, L, d)
    q = torch.einsum("sdv,snv->snd", emb, torch.nn.functional.one_hot(batch.query, emb.shape[2]).to(DTYPE))  # (S, N, d)
    scores = torch.einsum("snld,sde,sne->snl", x, wkq, q).masked_fill(~batch.mask, float("-inf"))  # (S, N, L)
    hidden = torch.einsum("snl,snld->snd", torch.softmax(scores, -1), x)  # (S, N, d)
    logits = torch.einsum("svd,snd->snv", wov, hidden)  # (S, N, V)
    ce = torch.logsumexp(logits, -1) - logits.gather(-1, batch.target[..., None]).squeeze(-1)  # (S, N)
    return (batch.weight * ce).sum(-1)


def embedding_space_l0(wov: torch.Tensor, emb: torch.Tensor, colloc: torch.Tensor) -> torch.Tensor:
    """(S,) L0: mean over the |V| length-1 samples x -> colloc[x] of the cross-entropy of W_ov E e_x."""
    logits = torch.einsum("svd,sdx->sxv", wov, emb)  # (S, V_tokens, V_logits)
    return (torch.logsumexp(logits, -1) - logits.gather(-1, colloc[..., None]).squeeze(-1)).mean(-1)


NTP_SHAPES = [  # (S, N, L, V, d, embedding)
    pytest.param(1, 7, 4, 5, 5, "identity", id="S1-identity"),
    pytest.param(3, 9, 5, 6, 6, "rotated", id="S3-rotated"),
    pytest.param(2, 5, 3, 6, 9, "rotated", id="S2-rotated-d>V"),
    pytest.param(4, 11, 6, 7, 4, "gaussian", id="S4-gaussian-d<V"),
    pytest.param(5, 6, 2, 4, 8, "gaussian", id="S5-gaussian-d>V"),
    pytest.param(2, 1, 1, 3, 3, "identity", id="S2-one-sample-length-1"),
]


@pytest.mark.parametrize("S,N,L,V,d,embedding", NTP_SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_ntp_closed_form_gradients_on_random_inputs(S, N, L, V, d, embedding, seed):
    gen = torch.Generator().manual_seed(1000 * seed + S * 31 + N)
    batch = random_token_batch(gen, S, N, L, V)
    emb = random_embedding(gen, embedding, S, d, V)
    dim = V if emb is None else d
    wkq = (2.0 * torch.randn(S, dim, dim, generator=gen, dtype=DTYPE)).requires_grad_(True)  # far from uniform attention
    wov = torch.randn(S, V, dim, generator=gen, dtype=DTYPE).requires_grad_(True)
    plain_emb = torch.eye(V, dtype=DTYPE).expand(S, V, V) if emb is None else emb
    ref = embedding_space_loss(wkq, wov, plain_emb, batch)
    auto_wkq, auto_wov = torch.autograd.grad(ref.sum(), [wkq, wov])  # members are independent

    key, tok = token_matrices(wkq.detach(), wov.detach(), emb)
    fwd = forward(key, tok, batch)
    assert_rel_close(fwd.loss, ref.detach(), "loss")
    g_wov, g_wkq = gradients(fwd, tok, emb, batch)
    assert_rel_close(g_wov, auto_wov, "grad W_ov")
    assert_rel_close(g_wkq, auto_wkq, "grad W_kq")
    # the partial requests the trainer makes, and the loss-free forward pass it uses between logs
    only_wov, none = gradients(forward(key, tok, batch, need_loss=False), tok, emb, batch, need_wkq=False)
    none_wov, only_wkq = gradients(fwd, tok, emb, batch, need_wov=False)
    assert none is None and none_wov is None
    assert torch.equal(only_wov, g_wov) and torch.equal(only_wkq, g_wkq)

    colloc = torch.randint(0, V, (S, V), generator=gen)  # (S, V) next token of each length-1 sample
    onehot = torch.nn.functional.one_hot(colloc, V).to(DTYPE)  # (S, V, V) row x = e_{n(x)}
    leaf = wov.detach().clone().requires_grad_(True)
    ref0 = embedding_space_l0(leaf, plain_emb, colloc)
    (auto0,) = torch.autograd.grad(ref0.sum(), [leaf])
    loss0, g0 = collocation_loss(token_matrices(None, wov.detach(), emb)[1], emb, onehot)
    assert_rel_close(loss0, ref0.detach(), "L0")
    assert_rel_close(g0, auto0, "grad L0")


@pytest.mark.parametrize("S,d,V", [(1, 3, 4), (3, 5, 5), (4, 6, 3)])
def test_ntp_factored_chain_rule_on_random_factors(S, d, V):
    """Params.chain maps merged-matrix gradients G_kq, G_ov to the factors: any upstream
    gradient, so a random linear functional <G, W(factors)> is differentiated by autograd."""
    gen = torch.Generator().manual_seed(S * 100 + d * 10 + V)
    shapes = {"wk": (d, d), "wq": (d, d), "wo": (V, d), "wv": (d, d)}
    leaves = {k: torch.randn(S, *s, generator=gen, dtype=DTYPE).requires_grad_(True) for k, s in shapes.items()}
    g_kq, g_ov = torch.randn(S, d, d, generator=gen, dtype=DTYPE), torch.randn(S, V, d, generator=gen, dtype=DTYPE)
    wkq, wov = Params(leaves, factored=True).merged()
    objective = (wkq * g_kq).sum() + (wov * g_ov).sum()
    auto = dict(zip(shapes, torch.autograd.grad(objective, list(leaves.values()))))
    detached = Params({k: v.detach() for k, v in leaves.items()}, factored=True)
    chained = detached.chain(g_kq, g_ov)
    for name in shapes:
        assert_rel_close(chained[name], auto[name], f"grad {name}")
    assert detached.chain(g_kq, None).keys() == {"wk", "wq"} and detached.chain(None, g_ov).keys() == {"wo", "wv"}


# --------------------------------------------------------------------------- disentangled
def random_prompts(gen: torch.Generator, U: int, N: int, L: int, d: int):
    """U datasets of N prompts: features (U, N, L, d) x2, labels y (U, N, L) in {-1, +1}, kinds (U, N, L)."""
    x1 = torch.randn(U, N, L, d, generator=gen, dtype=DTYPE)
    x2 = torch.randn(U, N, L, d, generator=gen, dtype=DTYPE)
    y = torch.randint(0, 2, (U, N, L), generator=gen).to(DTYPE) * 2 - 1
    kind = torch.randint(0, 3, (U, N, L), generator=gen)
    return x1, x2, y, kind


DIS_SHAPES = [  # (U datasets, K members per dataset, N prompts, L prompt length, d)
    pytest.param(1, 1, 12, 4, 3, id="M1"),
    pytest.param(2, 1, 9, 6, 4, id="M2"),
    pytest.param(2, 3, 10, 5, 3, id="M6-shared-K3"),
    pytest.param(1, 4, 7, 3, 5, id="M4-shared-K4"),
]


@pytest.mark.parametrize("output,full", [("split", False), ("joint", False), ("joint", True)])
@pytest.mark.parametrize("normalizer", ["L", "L-1", "sum"])
@pytest.mark.parametrize("U,K,N,L,d", DIS_SHAPES)
@pytest.mark.parametrize("minibatch", [False, True])
def test_disentangled_closed_form_gradients_on_random_inputs(output, full, normalizer, U, K, N, L, d, minibatch):
    gen = torch.Generator().manual_seed(U * 1000 + K * 100 + N * 10 + L + (7 if minibatch else 0))
    M = U * K
    batch = make_batch(*random_prompts(gen, U, N, L, d), full=full, per_data=K)
    k = 2 * d if full else d
    mats = [torch.randn(M, k, k, generator=gen, dtype=DTYPE).requires_grad_(True) for _ in range(1 if full else 2)]
    weight = None
    if minibatch:  # random prompt weights per member (a minibatch of random size, weights 1/B)
        keep = torch.rand(M, N, generator=gen) < 0.5
        keep[:, 0] = True
        weight = keep.to(DTYPE) / keep.sum(-1, keepdim=True)  # (M, N)
    per_prompt = logistic(dis_forward(tuple(mats), batch, output, normalizer).f, batch.target)  # (M, N)
    loss = (per_prompt * weight).sum(-1) if minibatch else per_prompt.mean(-1)  # (M,)
    auto = torch.autograd.grad(loss.sum(), mats)
    ours = dis_gradients(dis_forward(tuple(m.detach() for m in mats), batch, output, normalizer), batch, normalizer, weight)
    assert len(ours) == len(mats)
    for i, (a, b) in enumerate(zip(ours, auto)):
        assert_rel_close(a, b, f"grad matrix {i}")



@pytest.mark.parametrize("objective", ["total", "branches"])
@pytest.mark.parametrize("normalizer", ["L", "L-1", "sum"])
@pytest.mark.parametrize("U,K,N,L,d", DIS_SHAPES)
@pytest.mark.parametrize("minibatch", [False, True])
def test_disentangled_objective_gradients_on_random_inputs(objective, normalizer, U, K, N, L, d, minibatch):
    """train.objective: the (weighted) mean of log(1 + e^{-y f}) ("total") or of
    log(1 + e^{-y f1}) + log(1 + e^{-y f2}) ("branches", split block weights), written here
    from the parts' outputs (not through model.objective_loss), against autograd."""
    gen = torch.Generator().manual_seed(U * 1000 + K * 100 + N * 10 + L + (7 if minibatch else 0) + (3 if objective == "branches" else 0))
    M = U * K
    batch = make_batch(*random_prompts(gen, U, N, L, d), full=False, per_data=K)
    mats = [torch.randn(M, d, d, generator=gen, dtype=DTYPE).requires_grad_(True) for _ in range(2)]
    weight = None
    if minibatch:
        keep = torch.rand(M, N, generator=gen) < 0.5
        keep[:, 0] = True
        weight = keep.to(DTYPE) / keep.sum(-1, keepdim=True)  # (M, N)
    fwd = dis_forward(tuple(mats), batch, "split", normalizer)
    if objective == "total":
        per_prompt = logistic(fwd.out[0] + fwd.out[1], batch.target)  # (M, N)
    else:
        per_prompt = logistic(fwd.out[0], batch.target) + logistic(fwd.out[1], batch.target)  # (M, N)
    loss = (per_prompt * weight).sum(-1) if minibatch else per_prompt.mean(-1)  # (M,)
    auto = torch.autograd.grad(loss.sum(), mats)
    detached = dis_forward(tuple(m.detach() for m in mats), batch, "split", normalizer)
    ours = dis_gradients(detached, batch, normalizer, weight, objective)
    for i, (a, b) in enumerate(zip(ours, auto)):
        assert_rel_close(a, b, f"{objective} grad matrix {i}")
    # the objective's per-prompt loss agrees with the one written here
    assert torch.allclose(objective_loss(detached, batch.target, objective), per_prompt.detach(), rtol=1e-14, atol=0)
    if objective == "branches":  # the two objectives differ (each unit is driven by its own part)
        total = dis_gradients(detached, batch, normalizer, weight)
        assert max(float((a - b).abs().max()) for a, b in zip(ours, total)) > 1e-6


def test_disentangled_branches_objective_needs_two_units():
    gen = torch.Generator().manual_seed(5)
    batch = make_batch(*random_prompts(gen, 1, 4, 3, 2), full=True)
    fwd = dis_forward((torch.randn(1, 4, 4, generator=gen, dtype=DTYPE),), batch, "joint", "L")
    with pytest.raises(ValueError, match="branches"):
        dis_gradients(fwd, batch, "L", None, "branches")
    with pytest.raises(ValueError, match="unknown"):
        dis_gradients(fwd, batch, "L", None, "sum-of-parts")
