"""Padded tensors of an NTP dataset (the trainer's input), one row per distinct sample."""

from __future__ import annotations

import numpy as np
import torch

from stagewise.errors import UserError
from stagewise.labs.ntp.dataset import NTPDataset


def to_tensors(
    ds: NTPDataset, max_len: int, n_samples: int | None = None
) -> dict[str, torch.Tensor]:
    """Left-aligned, padded tensors of a dataset.

    With ``N = n_samples or len(ds.samples)`` and ``L = max_len``:
    ``idx`` (N, L) long token indices (0 on padding), ``mask`` (N, L) bool valid positions,
    ``query`` (N,) long, ``next`` (N,) long, ``weight`` (N,) float64 ``pi``, ``opt_mask``
    (N, L) bool valid positions holding the optimal token. Rows beyond ``len(ds.samples)``
    are padding samples: token 0 at position 0 only, next 0, weight 0.
    """
    count = len(ds.samples)
    rows = count if n_samples is None else n_samples
    if rows < count:
        raise UserError(f"n_samples={n_samples} is smaller than the dataset ({count} samples)")
    if ds.max_len > max_len:
        raise UserError(f"max_len={max_len} is shorter than the longest sample ({ds.max_len} tokens)")
    idx = np.zeros((rows, max_len), dtype=np.int64)  # (N, L)
    mask = np.zeros((rows, max_len), dtype=bool)  # (N, L)
    query = np.zeros(rows, dtype=np.int64)  # (N,)
    nxt = np.zeros(rows, dtype=np.int64)  # (N,)
    weight = np.zeros(rows, dtype=np.float64)  # (N,)
    optimal = np.zeros((rows, ds.vocab_size), dtype=bool)  # (N, V) token is an optimal token of the sample
    for i, sample in enumerate(ds.samples):
        length = len(sample.input)
        idx[i, :length] = sample.input
        mask[i, :length] = True
        query[i], nxt[i], weight[i] = sample.input[-1], sample.next, ds.weights[i]
        optimal[i, sorted(ds.optimal_set(i))] = True
    mask[count:, 0] = True
    optimal[count:, 0] = True  # padding samples: token 0 at position 0, counted as optimal
    opt_mask = mask & np.take_along_axis(optimal, idx, axis=1)  # (N, L)
    return {
        "idx": torch.from_numpy(idx),
        "mask": torch.from_numpy(mask),
        "query": torch.from_numpy(query),
        "next": torch.from_numpy(nxt),
        "weight": torch.from_numpy(weight),
        "opt_mask": torch.from_numpy(opt_mask),
    }
