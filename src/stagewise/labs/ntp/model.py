"""The one-layer transformer of the NTP lab, batched over an ensemble axis S.

Logits of a sample X = [x_1..x_L] with query x_L::

    a = softmax_l(x_l^T W_kq x_L)          attention of the last position over all L tokens
    z = W_ov sum_l a_l x_l                 logits over the vocabulary

No positional encoding, scaling, residual or layer norm (Huang, Liang, Yang 2024, Sec. 2).
Loss is the pi-weighted cross-entropy.

Every x_l is a token embedding E e_v, so the model only ever sees W_kq and W_ov through the
token matrices K = E^T W_kq E (key token x query token) and Z = W_ov E (logit x token).
The forward pass and the closed-form gradients below work on K and Z with gathers over
token indices: exact for any embedding matrix E (orthonormal or not), and the work scales
with N L + N V instead of N L d. Gradients are checked against autograd through a plain
embedding-space implementation in the tests.

Shapes: S ensemble members, N samples, L positions, d embedding dim, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenBatch:
    """Samples as token indices, padded; see :class:`stagewise.labs.ntp.problem.Problem`."""

    idx: torch.Tensor  # (S, N, L) long token index per position (0 on padding)
    mask: torch.Tensor  # (S, N, L) bool valid positions
    query: torch.Tensor  # (S, N) long query token
    target: torch.Tensor  # (S, N) long next token
    weight: torch.Tensor  # (S, N) pi, 0 on padding samples


@dataclass(frozen=True)
class Forward:
    """Intermediate values of one forward pass (all batched over S)."""

    attn: torch.Tensor  # (S, N, L) attention of the query position, 0 on padding
    token_attn: torch.Tensor  # (S, N, V) attention summed per token: the hidden state is E @ token_attn
    logits: torch.Tensor  # (S, N, V)
    per_sample_loss: torch.Tensor  # (S, N) cross-entropy
    loss: torch.Tensor  # (S,) weighted loss


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Stable per-sample cross-entropy. logits (..., V), target (...) long -> (...)."""
    return torch.logsumexp(logits, dim=-1) - logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)


def token_matrices(wkq: torch.Tensor, wov: torch.Tensor, emb: torch.Tensor,
                   unknown: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """K = E^T W_kq E (S, V, V) [key, query] and Z = W_ov E (S, V, V) [logit, token].

    wkq (S, d, d), wov (S, V, d), emb (S, d, V). ``unknown`` appends a zero-embedded token
    (index V): K becomes (S, V+1, V+1), Z (S, V, V+1).
    """
    key = torch.bmm(emb.transpose(1, 2), torch.bmm(wkq, emb))  # (S, V, V)
    tok = torch.bmm(wov, emb)  # (S, V, V)
    if unknown:
        key = torch.nn.functional.pad(key, (0, 1, 0, 1))
        tok = torch.nn.functional.pad(tok, (0, 1))
    return key, tok


def attention(key: torch.Tensor, idx: torch.Tensor, query: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax attention of the query over the valid positions.

    key (S, V, V) [key, query], idx (S, N, L), query (S, N), mask (S, N, L) bool -> (S, N, L).
    """
    columns = key.transpose(1, 2)  # (S, Vq, Vk): row q holds the scores of every key token
    per_sample = columns.gather(1, query.unsqueeze(-1).expand(-1, -1, columns.shape[2]))  # (S, N, Vk)
    scores = per_sample.gather(2, idx).masked_fill(~mask, float("-inf"))  # (S, N, L)
    return torch.softmax(scores, dim=-1)


def _token_sum(values: torch.Tensor, idx: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """Sum position values per token: (S, N, L) -> (S, N, V)."""
    out = values.new_zeros(*values.shape[:2], n_tokens)
    return out.scatter_add_(2, idx, values)


def forward(key: torch.Tensor, tok: torch.Tensor, batch: TokenBatch) -> Forward:
    """Full forward pass from the token matrices (see :func:`token_matrices`)."""
    attn = attention(key, batch.idx, batch.query, batch.mask)  # (S, N, L)
    token_attn = _token_sum(attn, batch.idx, tok.shape[2])  # (S, N, V)
    logits = torch.bmm(token_attn, tok.transpose(1, 2))  # (S, N, V_logits)
    per_sample = cross_entropy(logits, batch.target)  # (S, N)
    return Forward(attn, token_attn, logits, per_sample, (batch.weight * per_sample).sum(-1))


def gradients(fwd: Forward, tok: torch.Tensor, emb: torch.Tensor, batch: TokenBatch,
              need_wkq: bool = True, need_wov: bool = True) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Closed-form gradients of ``fwd.loss`` (per ensemble member).

    tok (S, V, V) = W_ov E, emb (S, d, V). Returns (grad_wov (S, V, d), grad_wkq (S, d, d));
    each is None when not asked for.
    """
    resid = torch.softmax(fwd.logits, dim=-1)  # (S, N, V) p
    resid = resid - torch.nn.functional.one_hot(batch.target, resid.shape[-1]).to(resid.dtype)  # p - e_y
    resid = resid * batch.weight.unsqueeze(-1)  # (S, N, V) pi (p - e_y)
    grad_wov = None
    if need_wov:
        grad_tok = torch.bmm(resid.transpose(1, 2), fwd.token_attn)  # (S, V, V) d loss / d Z
        grad_wov = torch.bmm(grad_tok, emb.transpose(1, 2))  # (S, V, d)
    if not need_wkq:
        return grad_wov, None
    grad_token_attn = torch.bmm(resid, tok)  # (S, N, V) d loss / d token_attn
    grad_attn = grad_token_attn.gather(2, batch.idx)  # (S, N, L)
    centred = grad_attn - (fwd.attn * grad_attn).sum(-1, keepdim=True)  # (S, N, L)
    grad_scores = fwd.attn * centred  # (S, N, L) softmax backward (0 on padding)
    per_key = _token_sum(grad_scores, batch.idx, emb.shape[2])  # (S, N, Vk)
    query_onehot = torch.nn.functional.one_hot(batch.query, emb.shape[2]).to(per_key.dtype)  # (S, N, Vq)
    grad_key = torch.bmm(per_key.transpose(1, 2), query_onehot)  # (S, Vk, Vq) d loss / d K
    grad_wkq = torch.bmm(emb, torch.bmm(grad_key, emb.transpose(1, 2)))  # (S, d, d)
    return grad_wov, grad_wkq


def collocation_loss(tok: torch.Tensor, emb: torch.Tensor, colloc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage-1 loss L0 on the |V| length-1 samples (attention is trivial) and its gradient.

    tok (S, V, V) = W_ov E, emb (S, d, V), colloc (S, V) long n(x).
    Returns (loss (S,), grad_wov (S, V, d)).
    """
    logits = tok.transpose(1, 2)  # (S, V_tokens, V_logits)
    loss = cross_entropy(logits, colloc).mean(-1)  # (S,)
    resid = torch.softmax(logits, -1) - torch.nn.functional.one_hot(colloc, logits.shape[-1]).to(logits.dtype)
    grad = torch.bmm(resid.transpose(1, 2), emb.transpose(1, 2)) / logits.shape[1]  # (S, V, d)
    return loss, grad


def predict(key: torch.Tensor, tok: torch.Tensor, idx: torch.Tensor, query: torch.Tensor,
            mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted token (S, N) and attention (S, N, L) for token-index sentences."""
    attn = attention(key, idx, query, mask)
    logits = torch.bmm(_token_sum(attn, idx, tok.shape[2]), tok.transpose(1, 2))  # (S, N, V)
    return logits.argmax(-1), attn
