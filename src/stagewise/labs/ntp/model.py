"""The one-layer transformer of the NTP lab, batched over an ensemble axis S.

Logits of a sample X = [x_1..x_L] with query x_L::

    a = softmax_l(x_l^T W_kq x_L)          attention of the last position over all L tokens
    z = W_ov sum_l a_l x_l                 logits over the vocabulary

No positional encoding, scaling, residual or layer norm (Huang, Liang, Yang 2024, Sec. 2).
Loss is the pi-weighted cross-entropy. Gradients are written in closed form (checked
against autograd in the tests), so one step costs a handful of batched einsums.

Shapes: S ensemble members, N samples, L positions, d embedding dim, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Forward:
    """Intermediate values of one forward pass (all batched over S)."""

    attn: torch.Tensor  # (S, N, L) attention of the query position, 0 on padding
    hidden: torch.Tensor  # (S, N, d) attended embedding sum_l a_l x_l
    logits: torch.Tensor  # (S, N, V)
    per_sample_loss: torch.Tensor  # (S, N) cross-entropy
    loss: torch.Tensor  # (S,) weighted loss


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Stable per-sample cross-entropy. logits (..., V), target (...) long -> (...)."""
    return torch.logsumexp(logits, dim=-1) - logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)


def attention(wkq: torch.Tensor, x: torch.Tensor, query: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax attention of the query over the valid positions.

    wkq (S, d, d), x (S, N, L, d), query (S, N, d), mask (S, N, L) bool -> (S, N, L).
    """
    key_dir = torch.einsum("sde,sne->snd", wkq, query)  # (S, N, d) = W_kq x_L
    scores = torch.einsum("snld,snd->snl", x, key_dir)  # (S, N, L)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def forward(wkq: torch.Tensor, wov: torch.Tensor, x: torch.Tensor, query: torch.Tensor, mask: torch.Tensor,
            target: torch.Tensor, weight: torch.Tensor) -> Forward:
    """Full forward pass.

    wkq (S, d, d), wov (S, V, d), x (S, N, L, d), query (S, N, d), mask (S, N, L),
    target (S, N) long, weight (S, N) = pi (0 on padding samples).
    """
    attn = attention(wkq, x, query, mask)  # (S, N, L)
    hidden = torch.einsum("snl,snld->snd", attn, x)  # (S, N, d)
    logits = torch.einsum("svd,snd->snv", wov, hidden)  # (S, N, V)
    per_sample = cross_entropy(logits, target)  # (S, N)
    return Forward(attn, hidden, logits, per_sample, (weight * per_sample).sum(-1))


def gradients(fwd: Forward, wov: torch.Tensor, x: torch.Tensor, query: torch.Tensor, target: torch.Tensor,
              weight: torch.Tensor, need_wkq: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Closed-form gradients of ``fwd.loss`` (per ensemble member).

    Returns (grad_wov (S, V, d), grad_wkq (S, d, d) or None).
    """
    resid = torch.softmax(fwd.logits, dim=-1)  # (S, N, V) p
    resid = resid - torch.nn.functional.one_hot(target, resid.shape[-1]).to(resid.dtype)  # p - e_y
    resid = resid * weight.unsqueeze(-1)  # (S, N, V) pi (p - e_y)
    grad_wov = torch.einsum("snv,snd->svd", resid, fwd.hidden)  # (S, V, d)
    if not need_wkq:
        return grad_wov, None
    grad_hidden = torch.einsum("svd,snv->snd", wov, resid)  # (S, N, d) W_ov^T r
    grad_attn = torch.einsum("snld,snd->snl", x, grad_hidden)  # (S, N, L)
    centred = grad_attn - (fwd.attn * grad_attn).sum(-1, keepdim=True)  # (S, N, L)
    grad_scores = fwd.attn * centred  # (S, N, L) softmax backward (0 on padding)
    key_grad = torch.einsum("snl,snld->snd", grad_scores, x)  # (S, N, d)
    grad_wkq = torch.einsum("snd,sne->sde", key_grad, query)  # (S, d, d)
    return grad_wov, grad_wkq


def collocation_loss(wov: torch.Tensor, emb: torch.Tensor, colloc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage-1 loss L0 on the |V| length-1 samples (attention is trivial) and its gradient.

    wov (S, V, d), emb (S, d, V) token embeddings as columns, colloc (S, V) long n(x).
    Returns (loss (S,), grad_wov (S, V, d)).
    """
    logits = torch.einsum("svd,sdx->sxv", wov, emb)  # (S, V_tokens, V_logits)
    n_tokens = emb.shape[-1]
    loss = cross_entropy(logits, colloc).mean(-1)  # (S,)
    resid = torch.softmax(logits, -1) - torch.nn.functional.one_hot(colloc, logits.shape[-1]).to(logits.dtype)
    grad = torch.einsum("sxv,sdx->svd", resid, emb) / n_tokens  # (S, V, d)
    return loss, grad


def predict(wkq: torch.Tensor, wov: torch.Tensor, x: torch.Tensor, query: torch.Tensor,
            mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted token and attention. Shapes as :func:`forward`; returns ((S, N), (S, N, L))."""
    attn = attention(wkq, x, query, mask)
    logits = torch.einsum("svd,snd->snv", wov, torch.einsum("snl,snld->snd", attn, x))  # (S, N, V)
    return logits.argmax(-1), attn
