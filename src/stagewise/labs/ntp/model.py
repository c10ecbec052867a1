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
embedding-space implementation in tests/labs/ntp/test_model.py and tests/labs/test_gradients.py.

Shapes: S ensemble members, N samples, L positions, d embedding dim, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

import torch


@dataclass(frozen=True)
class TokenBatch:
    """Samples as token indices, padded; see :class:`stagewise.labs.ntp.problem.Problem`."""

    idx: torch.Tensor  # (S, N, L) long token index per position (0 on padding)
    mask: torch.Tensor  # (S, N, L) bool valid positions
    query: torch.Tensor  # (S, N) long query token
    target: torch.Tensor  # (S, N) long next token
    weight: torch.Tensor  # (S, N) pi, 0 on padding samples
    target_onehot: torch.Tensor  # (S, N, V) float e_y
    weighted_target: torch.Tensor  # (S, N, V) pi e_y
    pair_index: torch.Tensor  # (S, N * L) long: key token * V + query token, into K flattened

    @classmethod
    def build(cls, idx, mask, query, target, weight, vocab: int) -> "TokenBatch":
        """Precomputes the one-hot targets (in ``weight``'s dtype) and the (key, query) index."""
        onehot = torch.nn.functional.one_hot(target, vocab).to(weight.dtype)  # (S, N, V)
        pairs = (idx * vocab + query.unsqueeze(-1)).flatten(1)  # (S, N * L)
        return cls(idx, mask, query, target, weight, onehot, onehot * weight.unsqueeze(-1), pairs)


@dataclass(frozen=True)
class Forward:
    """Intermediate values of one forward pass (all batched over S)."""

    attn: torch.Tensor  # (S, N, L) attention of the query position, 0 on padding
    token_attn: torch.Tensor  # (S, N, V) attention summed per token: the hidden state is E @ token_attn
    logits: torch.Tensor  # (S, N, V)
    weighted_probs: torch.Tensor  # (S, N, V) pi * softmax(logits)
    per_sample_loss: torch.Tensor | None  # (S, N) cross-entropy (None when not asked for)
    loss: torch.Tensor | None  # (S,) weighted loss


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Stable per-sample cross-entropy. logits (..., V), target (...) long -> (...)."""
    return torch.logsumexp(logits, dim=-1) - logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)


def softmax_lse(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(softmax, logsumexp) over the last axis, from one exp of the shifted logits.

    Elementwise ops on the whole tensor: much faster than ``torch.softmax`` on short rows.
    -inf entries (masked positions) get probability 0; every row needs one finite entry.
    """
    top = logits.amax(-1, keepdim=True)  # (..., 1)
    expd = torch.exp(logits - top)  # (..., V)
    total = expd.sum(-1, keepdim=True)  # (..., 1)
    return expd / total, (torch.log(total) + top).squeeze(-1)


@overload
def token_matrices(wkq: torch.Tensor, wov: torch.Tensor, emb: torch.Tensor | None,
                   unknown: bool = False) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def token_matrices(wkq: torch.Tensor | None, wov: torch.Tensor, emb: torch.Tensor | None,
                   unknown: bool = False) -> tuple[torch.Tensor | None, torch.Tensor]: ...
def token_matrices(wkq: torch.Tensor | None, wov: torch.Tensor, emb: torch.Tensor | None,
                   unknown: bool = False) -> tuple[torch.Tensor | None, torch.Tensor]:
    """K = E^T W_kq E (S, V, V) [key, query] and Z = W_ov E (S, V, V) [logit, token].

    wkq (S, d, d) (None: skip K, which is then None), wov (S, V, d), emb (S, d, V) or None
    for the identity (one-hot with d = |V|). ``unknown`` appends a zero-embedded token
    (index V): K becomes (S, V+1, V+1), Z (S, V, V+1); it needs ``wkq``.
    """
    if emb is None:
        key, tok = wkq, wov
    else:
        key = torch.bmm(emb.transpose(1, 2), torch.bmm(wkq, emb)) if wkq is not None else None  # (S, V, V)
        tok = torch.bmm(wov, emb)  # (S, V, V)
    if not unknown:
        return key, tok
    if key is None:
        raise ValueError("token_matrices: unknown=True pads K, so it needs wkq (got None)")
    return with_unknown(key, tok)


def with_unknown(key: torch.Tensor, tok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Append the zero-embedded unknown token (index V): K (S, V+1, V+1), Z (S, V, V+1)."""
    return torch.nn.functional.pad(key, (0, 1, 0, 1)), torch.nn.functional.pad(tok, (0, 1))


def attention_weights(key: torch.Tensor, idx: torch.Tensor, query: torch.Tensor, mask: torch.Tensor,
              pair_index: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax attention of the query over the valid positions.

    key (S, V, V) [key, query], idx (S, N, L), query (S, N), mask (S, N, L) bool -> (S, N, L).
    ``pair_index`` (S, N * L) = idx * V + query may be passed precomputed.
    """
    vocab = key.shape[2]
    if pair_index is None:
        pair_index = (idx * vocab + query.unsqueeze(-1)).flatten(1)  # (S, N * L)
    scores = key.reshape(key.shape[0], -1).gather(1, pair_index).view_as(mask)  # (S, N, L) x_l^T W_kq x_q
    return softmax_lse(scores.masked_fill(~mask, float("-inf")))[0]


def _token_sum(values: torch.Tensor, idx: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """Sum position values per token: (S, N, L) -> (S, N, V)."""
    out = values.new_zeros(*values.shape[:2], n_tokens)
    return out.scatter_add_(2, idx, values)


def forward(key: torch.Tensor, tok: torch.Tensor, batch: TokenBatch, need_loss: bool = True) -> Forward:
    """Full forward pass from the token matrices (see :func:`token_matrices`).

    The gradients need only the probabilities; ``need_loss=False`` skips the loss values.
    """
    attn = attention_weights(key, batch.idx, batch.query, batch.mask, batch.pair_index)  # (S, N, L)
    token_attn = _token_sum(attn, batch.idx, tok.shape[2])  # (S, N, V)
    logits = torch.bmm(token_attn, tok.transpose(1, 2))  # (S, N, V_logits)
    top = logits.amax(-1, keepdim=True)  # (S, N, 1)
    expd = torch.exp(logits - top)  # (S, N, V)
    total = expd.sum(-1, keepdim=True)  # (S, N, 1)
    weighted_probs = expd.mul_(batch.weight.unsqueeze(-1) / total)  # (S, N, V) pi p (in place: expd is ours)
    if not need_loss:
        return Forward(attn, token_attn, logits, weighted_probs, None, None)
    lse = (torch.log(total) + top).squeeze(-1)  # (S, N)
    per_sample = lse - (logits * batch.target_onehot).sum(-1)  # (S, N) cross-entropy
    return Forward(attn, token_attn, logits, weighted_probs, per_sample, (batch.weight * per_sample).sum(-1))


def _to_embedding(grad_token: torch.Tensor, emb: torch.Tensor | None, both_sides: bool) -> torch.Tensor:
    """Map a gradient w.r.t. Z (right side) or K (both sides) back to W_ov / W_kq."""
    if emb is None:
        return grad_token
    right = torch.bmm(grad_token, emb.transpose(1, 2))  # (S, ., d)
    return torch.bmm(emb, right) if both_sides else right


def gradients(fwd: Forward, tok: torch.Tensor, emb: torch.Tensor | None, batch: TokenBatch,
              need_wkq: bool = True, need_wov: bool = True) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Closed-form gradients of the weighted loss (per ensemble member).

    tok (S, V, V) = W_ov E, emb (S, d, V) or None (identity). Returns
    (grad_wov (S, V, d), grad_wkq (S, d, d)); each is None when not asked for.
    """
    resid = fwd.weighted_probs - batch.weighted_target  # (S, N, V) pi (p - e_y)
    grad_wov = None
    if need_wov:
        grad_tok = torch.bmm(resid.transpose(1, 2), fwd.token_attn)  # (S, V, V) d loss / d Z
        grad_wov = _to_embedding(grad_tok, emb, both_sides=False)  # (S, V, d)
    if not need_wkq:
        return grad_wov, None
    grad_token_attn = torch.bmm(resid, tok)  # (S, N, V) d loss / d token_attn
    grad_attn = grad_token_attn.gather(2, batch.idx)  # (S, N, L)
    centred = grad_attn - (fwd.attn * grad_attn).sum(-1, keepdim=True)  # (S, N, L)
    grad_scores = fwd.attn * centred  # (S, N, L) softmax backward (0 on padding)
    vocab = tok.shape[2]
    grad_key = grad_scores.new_zeros(grad_scores.shape[0], vocab * vocab)  # (S, Vk * Vq) d loss / d K
    grad_key.scatter_add_(1, batch.pair_index, grad_scores.flatten(1))
    return grad_wov, _to_embedding(grad_key.view(-1, vocab, vocab), emb, both_sides=True)  # (S, d, d)


def collocation_loss(tok: torch.Tensor, emb: torch.Tensor | None, colloc_onehot: torch.Tensor,
                     need_loss: bool = True) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Stage-1 loss L0 on the |V| length-1 samples (attention is trivial) and its gradient.

    tok (S, V, V) = W_ov E, emb (S, d, V) or None (identity), colloc_onehot (S, V, V) with
    row x = e_{n(x)}. Returns (loss (S,) or None, grad_wov (S, V, d)).
    """
    logits = tok.transpose(1, 2)  # (S, V_tokens, V_logits)
    probs, lse = softmax_lse(logits)
    loss = (lse - (logits * colloc_onehot).sum(-1)).mean(-1) if need_loss else None  # (S,)
    resid = (probs - colloc_onehot).transpose(1, 2) / logits.shape[1]  # (S, V_logits, V_tokens)
    return loss, _to_embedding(resid, emb, both_sides=False)


def predict(key: torch.Tensor, tok: torch.Tensor, idx: torch.Tensor, query: torch.Tensor,
            mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted token (S, N) and attention (S, N, L) for token-index sentences."""
    attn = attention_weights(key, idx, query, mask)
    logits = torch.bmm(_token_sum(attn, idx, tok.shape[2]), tok.transpose(1, 2))  # (S, N, V)
    return logits.argmax(-1), attn
