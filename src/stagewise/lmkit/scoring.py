"""Total log-probability of whole texts under a Hugging Face causal LM, batched.

A text is tokenized WITHOUT special tokens into ``t_1..t_n`` and scored after one prefix
token ``p``::

    log P(text) = sum_{i=1..n} log_softmax(logits(p, t_1..t_{i-1}))[t_i]

i.e. the log-softmax of the logits at positions 0..n-1 of ``[p, t_1..t_n]`` is gathered at
tokens 1..n and summed. ``p`` is the tokenizer's BOS id, or its EOS id when it has no BOS.

This is lm-evaluation-harness's convention for a loglikelihood request with an empty context
(checked in the installed lm_eval 0.4.13):

* lm_eval/models/huggingface.py, ``HFLM.prefix_token_id``: ``if self.custom_prefix_token_id
  is not None: return self.custom_prefix_token_id`` / ``if self.tokenizer.bos_token_id is not
  None: return self.tokenizer.bos_token_id`` / ``return self.tokenizer.eos_token_id``
  (``prefix_id=`` here plays the role of lm_eval's ``prefix_token_id=`` model argument);
* lm_eval/api/model.py, ``TemplateLM.loglikelihood``: ``if context == "":``
  ``continuation_enc = self.tok_encode(continuation, add_special_tokens=False)``;
  ``context_enc, continuation_enc = ([self.prefix_token_id], continuation_enc) if
  self.prefix_token_id != continuation_enc[0] else (continuation_enc[:1], continuation_enc[1:])``.

The else-branch is mirrored too: a text whose first token already is ``p`` gets no second
prefix and is scored from ``t_2`` on. An empty text scores 0 (lm_eval fails on it).

Batching: texts are sorted by token length (longest first), packed into batches of at most
``batch_tokens`` padded tokens (rows x longest row; a longer text gets a batch of its own)
with at most :data:`MAX_PADDING` of them padding, right-padded with an attention mask, run
through the model once per batch, scored with one log_softmax (float32 at least) and one
gather per batch, padding masked out, and the scores put back in input order. No Python
loop runs over tokens or over the texts of a batch.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np
import torch

from stagewise.errors import UserError

DEFAULT_BATCH_TOKENS = 1024
"""Padded tokens per batch (rows x longest sequence, prefix included). The logits of a batch
take up to ``batch_tokens x vocab x 4`` bytes twice (logits and log-softmax): about 400 MB for
GPT-2's 50,257 tokens at 1024. Larger batches did not run faster on 2 CPU cores; raise it
on a GPU."""

MAX_PADDING = 0.02
"""A batch stops taking (shorter) rows when its padding would pass this share of its padded
tokens: costs at most one extra batch per distinct length, saves the padded positions."""

MIN_SOFTMAX_DTYPE = torch.float32
"""log_softmax runs in the logits' dtype promoted to at least this one."""


def prefix_token_id(tokenizer) -> int:
    """The token every text is scored after: BOS, else EOS (lm_eval's ``prefix_token_id``).

    Example::

        prefix_token_id(gpt2_bpe())                 # 50256: GPT-2's BOS = EOS = <|endoftext|>
    """
    for name in ("bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None:
            return int(value)
    raise UserError(f"tokenizer {type(tokenizer).__name__} has neither a BOS nor an EOS token; "
                    "pass prefix_id= (a token id to score every text after)")


def encode_texts(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, without special tokens (one batched tokenizer call).

    Example::

        encode_texts(gpt2_bpe(), ["Hello world", " Paris"])   # [[15496, 995], [6342]]
    """
    texts = list(texts)
    bad = [i for i, text in enumerate(texts) if not isinstance(text, str)]
    if bad:
        raise UserError(f"text {bad[0]} is a {type(texts[bad[0]]).__name__}, not a str "
                        f"({len(bad)} non-string texts of {len(texts)})")
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def with_prefix(token_ids: Sequence[Sequence[int]], prefix_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ``[p, t_1..t_n]`` sequences (no ``p`` added where ``t_1 == p``).

    Returns ``(flat, lengths)``: (sum of lengths,) int64 token ids and (N,) int64 sequence
    lengths (each >= 1, prefix included).

    Example::

        flat, lengths = with_prefix([[15496, 995], [50256, 11]], 50256)
        # flat [50256, 15496, 995, 50256, 11], lengths [3, 2]: the second already starts with p
    """
    lengths = np.fromiter((len(ids) for ids in token_ids), dtype=np.int64, count=len(token_ids))  # (N,)
    flat = np.fromiter(itertools.chain.from_iterable(token_ids), dtype=np.int64, count=int(lengths.sum()))
    starts = np.cumsum(lengths) - lengths  # (N,) offset of each text in flat
    first = flat[np.minimum(starts, max(flat.size - 1, 0))] if flat.size else np.zeros_like(lengths)  # (N,)
    needs = (lengths == 0) | (first != prefix_id)  # (N,) bool: prepend p
    flat = np.insert(flat, starts[needs], prefix_id)  # (sum of new lengths,)
    return flat, lengths + needs


def max_positions(model) -> int | None:
    """The longest input ``model`` takes (its config's ``n_positions`` or
    ``max_position_embeddings``), None when its config says none.

    Example::

        max_positions(GPT2LMHeadModel(GPT2Config(n_positions=64)))   # 64
    """
    config = getattr(model, "config", None)
    for name in ("n_positions", "max_position_embeddings"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _check_inputs(model, flat: np.ndarray, lengths: np.ndarray) -> None:
    limit = max_positions(model)
    if limit is not None and lengths.size and lengths.max() > limit:
        i = int(lengths.argmax())
        raise UserError(f"text {i} has {int(lengths[i])} tokens with the prefix; the model takes at most "
                        f"{limit} positions (shorten or split the text)")
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    vocab = getattr(embeddings, "num_embeddings", None)
    if vocab is not None and flat.size and (flat.max() >= vocab or flat.min() < 0):
        bad = int(flat.max() if flat.max() >= vocab else flat.min())
        raise UserError(f"token id {bad} is outside the model's vocabulary 0..{vocab - 1} "
                        "(tokenizer and model do not match)")


def plan_batches(lengths: np.ndarray, batch_tokens: int,
                 max_padding: float = MAX_PADDING) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Length-sorted order and ``[start, end)`` slices of it.

    Longest first; a batch takes the next rows while rows x its first (longest) row's length
    <= ``batch_tokens`` and its padding stays <= ``max_padding`` of its padded tokens (at
    least one row per batch). Padding can only grow as shorter rows join, so each batch is
    one ``searchsorted``.

    Example::

        order, slices = plan_batches(np.array([4, 8, 8]), batch_tokens=16)
        # order [1, 2, 0], slices [(0, 2), (2, 3)]: the two 8s together, the 4 alone
    """
    order = np.argsort(-lengths, kind="stable")  # (N,) longest first, ties in input order
    sorted_lengths = lengths[order]  # (N,)
    slices, start = [], 0
    while start < order.size:
        width = int(sorted_lengths[start])
        rows = max(1, batch_tokens // width)
        pad = np.cumsum(width - sorted_lengths[start:start + rows])  # (rows,) padding with 1..rows rows
        padding = pad / (width * np.arange(1, pad.size + 1))  # (rows,) non-decreasing
        take = max(1, int(np.searchsorted(padding, max_padding, side="right")))
        slices.append((start, start + take))
        start += take
    return order, slices


def token_sequence_logprobs(model, flat: np.ndarray, lengths: np.ndarray, *,
                            batch_tokens: int = DEFAULT_BATCH_TOKENS, device=None) -> np.ndarray:
    """(N,) float64: ``sum_{i>=1} log P(s_i | s_0..s_{i-1})`` of each sequence ``s``.

    ``flat`` (sum of lengths,) holds the sequences back to back, ``lengths`` (N,) their
    lengths (>= 1; the first token is the context and is not scored).

    Example::

        flat, lengths = with_prefix(encode_texts(tok, texts), prefix_token_id(tok))
        token_sequence_logprobs(model, flat, lengths, batch_tokens=4096)   # (N,) float64
    """
    if not isinstance(batch_tokens, (int, np.integer)) or isinstance(batch_tokens, bool) or batch_tokens < 1:
        raise UserError(f"batch_tokens={batch_tokens!r} is not allowed: give a positive integer")
    flat, lengths = np.asarray(flat, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    _check_inputs(model, flat, lengths)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    starts = np.cumsum(lengths) - lengths  # (N,)
    order, slices = plan_batches(lengths, int(batch_tokens))
    scores = np.zeros(lengths.size, dtype=np.float64)  # (N,)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start, end in slices:
                rows = order[start:end]  # (B,) input indices
                width = int(lengths[rows[0]])
                if width < 2:
                    continue  # only prefixes left: nothing to score
                scores[rows] = _score_batch(model, flat, starts[rows], lengths[rows], width, device)
    finally:
        model.train(was_training)
    return scores


def _score_batch(model, flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int,
                 device: torch.device) -> np.ndarray:
    """(B,) float64 scores of the B sequences at ``flat[starts[b]:starts[b] + lengths[b]]``."""
    positions = np.arange(width)  # (L,)
    valid = positions[None, :] < lengths[:, None]  # (B, L) bool
    index = np.where(valid, starts[:, None] + positions[None, :], 0)  # (B, L) into flat
    ids = torch.from_numpy(np.where(valid, flat[index], 0)).to(device)  # (B, L) right-padded with id 0
    mask = torch.from_numpy(valid).to(device)  # (B, L)
    # the last token is only a target: the model sees positions 0..L-2 (as lm_eval does)
    logits = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1].long()).logits  # (B, L-1, V)
    dtype = torch.promote_types(logits.dtype, MIN_SOFTMAX_DTYPE)
    logprobs = torch.log_softmax(logits.to(dtype), dim=-1)  # (B, L-1, V)
    del logits
    token_lp = logprobs.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, L-1) log P(t_i | t_<i)
    token_lp = torch.where(mask[:, 1:], token_lp, torch.zeros((), dtype=dtype, device=device))  # (B, L-1)
    return token_lp.double().sum(-1).cpu().numpy()  # (B,)


def sequence_logprobs(model, tokenizer, texts: Sequence[str], *, prefix_id: int | None = None,
                      batch_tokens: int = DEFAULT_BATCH_TOKENS, device=None) -> np.ndarray:
    """(N,) float64 total log-probability of each text after the prefix token (see module doc).

    Args:
        model: a causal LM returning ``.logits`` of shape (B, L, V) for ``input_ids`` and
            ``attention_mask``; put in eval mode for the call (its mode is restored after).
        tokenizer: a Hugging Face tokenizer (texts are encoded without special tokens).
        texts: N strings.
        prefix_id: the context token; default BOS, else EOS (:func:`prefix_token_id`).
        batch_tokens: padded tokens per forward pass (rows x longest row).
        device: where the inputs go (default: the device of the model's first parameter;
            the model must already be there).

    Example::

        sequence_logprobs(model, tok, ["The cat sleeps.", "The cat sleep."])   # (2,) float64, higher = likelier
    """
    token_ids = encode_texts(tokenizer, texts)
    prefix = prefix_token_id(tokenizer) if prefix_id is None else int(prefix_id)
    flat, lengths = with_prefix(token_ids, prefix)
    return token_sequence_logprobs(model, flat, lengths, batch_tokens=batch_tokens, device=device)
