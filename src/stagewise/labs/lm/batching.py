"""Encoded datasets, padded batches and the logits at each prompt's true last token.

Prompts are tokenized once (one tokenizer call) into a right-padded id matrix ``ids``
(N, L_max) with ``lengths`` (N,). A batch of rows is cut to its longest prompt and laid out

* left padding: ``[pad .. pad, t_1 .. t_n]``, attention mask 0 on pads, position ids
  ``cumsum(mask) - 1`` (so every prompt sees positions 0..n-1), logits read at column -1;
* right padding: ``[t_1 .. t_n, pad .. pad]``, the same mask, logits read at column n - 1;
* the authors' defect (``original=True``): right padding with EOS, *no* mask, default
  positions, logits read at column -1 (a pad token for every prompt shorter than the
  batch's longest).

Only the last position's hidden state goes through the output matrix (B x d x V' instead of
B x L x d x V').
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence, overload

import torch
import torch.nn.functional as F


@dataclass(frozen=True, eq=False)
class Encoded:
    """A tokenized dataset in model-row ids.

    Attributes:
        ids: (N, L_max) int64 right-padded with ``pad``.
        lengths: (N,) int64 tokens per row (>= 1).
        targets: (N,) int64 the answer's model row (answer framing) or -1 (lm framing).
        task: (N,) int64 index into ``tasks``.
        tasks: task names.
        example_ids: the N example ids.
        pad: the pad row id.
    """

    ids: torch.Tensor
    lengths: torch.Tensor
    targets: torch.Tensor
    task: torch.Tensor
    tasks: tuple[str, ...]
    example_ids: tuple[str, ...]
    pad: int

    def __len__(self) -> int:
        return int(self.lengths.shape[0])


def tokenize(tokenizer: Any, texts: Sequence[str], prefix: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One tokenizer call over ``texts`` -> (ids (N, L_max) right-padded with 0, lengths (N,));
    ``prefix`` is prepended to every row (BOS for the lm framing)."""
    enc = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    rows = [([prefix] if prefix is not None else []) + list(r) for r in enc]
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)  # (N,)
    ids = torch.zeros(len(rows), int(lengths.max()) if len(rows) else 0, dtype=torch.long)  # (N, L_max)
    flat = torch.tensor([t for r in rows for t in r], dtype=torch.long)
    mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]  # (N, L_max)
    ids[mask] = flat
    return ids, lengths


def to_rows(ids: torch.Tensor, table: torch.Tensor | None) -> torch.Tensor:
    """Original token ids -> model rows through a compact-vocabulary lookup (None: same)."""
    return ids if table is None else table[ids]


@overload
def layout(enc: Encoded, rows: torch.Tensor, padding: str, original: Literal[False] = False,
           eos: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]: ...
@overload
def layout(enc: Encoded, rows: torch.Tensor, padding: str, original: bool = False,
           eos: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor]: ...
def layout(enc: Encoded, rows: torch.Tensor, padding: str, original: bool = False,
           eos: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
    """The batch ``rows`` (B,) as (input_ids (B, L), attention_mask (B, L) or None,
    position_ids (B, L) or None, last (B,) column of each row's last real token); the
    mask and positions are None only in the ``original`` layout."""
    lengths = enc.lengths[rows]  # (B,)
    width = int(lengths.max())
    ids = enc.ids[rows, :width]  # (B, L) right-padded
    col = torch.arange(width)[None, :]  # (1, L)
    real = col < lengths[:, None]  # (B, L)
    if original:
        filled = torch.where(real, ids, torch.full_like(ids, enc.pad if eos is None else eos))
        return filled, None, None, torch.full_like(lengths, width - 1)
    if padding == "right":
        filled = torch.where(real, ids, torch.full_like(ids, enc.pad))
        mask = real.long()
        return filled, mask, (mask.cumsum(1) - 1).clamp(min=0), lengths - 1
    shift = width - lengths  # (B,) pads in front
    source = (col - shift[:, None]).clamp(min=0)  # (B, L) column of the right-padded row
    mask = (col >= shift[:, None]).long()  # (B, L)
    filled = torch.where(mask.bool(), ids.gather(1, source), torch.full_like(ids, enc.pad))
    return filled, mask, (mask.cumsum(1) - 1).clamp(min=0), torch.full_like(lengths, width - 1)


def last_logits(model: Any, input_ids: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None,
                last: torch.Tensor) -> torch.Tensor:
    """(B, V') logits at column ``last`` (B,) of every row; only those hidden states go
    through the output matrix."""
    base = getattr(model, "base_model", None)
    head = model.get_output_embeddings()
    if base is None or base is model or head is None:
        logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions).logits  # (B, L, V')
        return logits[torch.arange(len(last)), last]
    hidden = base(input_ids=input_ids, attention_mask=mask, position_ids=positions).last_hidden_state  # (B, L, d)
    return head(hidden[torch.arange(len(last), device=hidden.device), last.to(hidden.device)])  # (B, V')


def token_nll(model: Any, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(B, L-1) next-token NLL of every real target token (0 on padding); the lm framing.
    Targets are tokens 1..L-1 predicted from positions 0..L-2 (right padding expected)."""
    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions).logits  # (B, L, V')
    nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), input_ids[:, 1:], reduction="none")  # (B, L-1)
    return nll * mask[:, 1:].to(nll.dtype)


def length_sorted_batches(lengths: torch.Tensor, size: int) -> list[torch.Tensor]:
    """Row indices grouped into batches of ``size`` by decreasing length (evaluation only)."""
    order = torch.argsort(lengths, descending=True, stable=True)
    return list(torch.split(order, size))


def dataset_batches(n: int, size: int, order: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Consecutive batches of ``size`` rows in dataset order (or in ``order``)."""
    rows = torch.arange(n) if order is None else order
    return list(torch.split(rows, size))
