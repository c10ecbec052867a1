"""One finite check for every lab: NaN/inf in losses or weights stops the run with the
step and the first bad seed named (status ``diverged``, exit code 3)."""

from __future__ import annotations

from typing import Mapping, Sequence

import torch


class Diverged(Exception):
    """Raised when a loss or weight becomes NaN/inf; names the step and seed."""

    def __init__(self, step: int, seed: int, what: str):
        self.step, self.seed, self.what = step, seed, what
        super().__init__(f"diverged at step {step}, seed {seed}: {what}")


def nonfinite_members(tensor: torch.Tensor) -> torch.Tensor:
    """(S,) bool: members whose slice of ``tensor`` (S, ...) holds a NaN or inf."""
    return ~torch.isfinite(tensor.reshape(tensor.shape[0], -1)).all(-1)


def check_finite(step: int, seeds: Sequence[int], values: Mapping[str, torch.Tensor] | None = None,
                 weights: Mapping[str, torch.Tensor] | None = None) -> None:
    """Raise :class:`Diverged` at the first non-finite value (metrics first, then weights).

    ``values`` and ``weights`` map names to tensors with a leading member axis (S, ...).
    """
    for kind, group in (("", values or {}), ("weights ", weights or {})):
        for name, tensor in group.items():
            if tensor is None:
                continue
            bad = nonfinite_members(tensor)
            if bad.any():
                raise Diverged(step, int(seeds[int(bad.nonzero()[0])]), f"{kind}{name} {'are' if kind else 'is'} not finite")
