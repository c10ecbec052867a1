"""One finite check for every lab: NaN/inf in losses or weights stops the run with the
step and the first bad seed named (status ``diverged``, exit code 3).

Every training loop calls :func:`check_finite` with its losses and its weights, each with
a leading member axis (S, ...), at least at every logged step and before every
checkpoint. Per member:

* a value (a loss) diverged when any of its entries is NaN or +-inf;
* a weight tensor diverged when its squared Frobenius norm ``sum_i w_i^2``, summed in
  the weight's dtype (float32 at least: half precision is summed in float32), is not
  finite: a NaN or inf entry, or entries so large that the norm overflows (float64:
  ||W|| > ~1.3e154; float32: ~1.8e19), as the labs' own norm metrics do. Such weights
  have no usable norm: normalized steps, norm metrics and most losses built on them are
  inf or NaN from then on.

The whole check is one reduction per tensor, stacked into a (K, S) mask and read back
with one device synchronization; the names and members are only looked up on failure.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

NORM_ACCUMULATORS = {torch.float64: torch.float64}  # every other dtype sums its squares in float32
DOT_MIN_ENTRIES = 1 << 16  # from this size a batched dot beats square-then-sum (~5x on a 38M-entry embedding)


class Diverged(Exception):
    """Raised when a loss or weight becomes NaN/inf; names the step and seed."""

    def __init__(self, step: int, seed: int, what: str):
        self.step, self.seed, self.what = step, seed, what
        super().__init__(f"diverged at step {step}, seed {seed}: {what}")


def nonfinite_members(tensor: torch.Tensor) -> torch.Tensor:
    """(S,) bool: members whose slice of ``tensor`` (S, ...) holds a NaN or inf."""
    return ~torch.isfinite(tensor.reshape(tensor.shape[0], -1)).all(-1)


def member_square_norms(tensor: torch.Tensor) -> torch.Tensor:
    """(S,) ``sum_i w_i^2`` of each member's slice of ``tensor`` (S, ...), in float32 or
    float64 (inf when it overflows: the check tests this sum, not a rescaled norm)."""
    flat = tensor.detach().reshape(tensor.shape[0], -1)  # (S, P)
    flat = flat.to(NORM_ACCUMULATORS.get(flat.dtype, torch.float32))
    if flat.numel() >= DOT_MIN_ENTRIES:
        return torch.einsum("sp,sp->s", flat, flat)  # (S,): a batched BLAS dot, no (S, P) temporary
    return flat.square().sum(-1)  # (S,)


def find_nonfinite(step: int, seeds: Sequence[int], values: Mapping[str, torch.Tensor | None] | None = None,
                   weights: Mapping[str, torch.Tensor | None] | None = None) -> Diverged | None:
    """The :class:`Diverged` :func:`check_finite` would raise (None: everything is finite).

    ``values`` and ``weights`` map names to tensors with a leading member axis (S, ...);
    None and empty entries are skipped. The first bad name (values first, then weights, in order)
    and its first bad member are named.
    """
    named = [(name, False, t) for name, t in (values or {}).items() if t is not None and t.numel()]
    named += [(name, True, t) for name, t in (weights or {}).items() if t is not None and t.numel()]
    if not named:
        return None
    device = named[0][2].device
    # per member, a number that is finite iff the check passes: sum of squares (weights), max |x| (values)
    probe = torch.stack([(member_square_norms(t) if is_weight else t.detach().reshape(t.shape[0], -1).abs().amax(-1))
                         .to(device, torch.float64) for _, is_weight, t in named])  # (K, S)
    bad = ~torch.isfinite(probe)  # (K, S)
    if not bool(bad.any()):  # the one synchronization of a passing check
        return None
    k = int(bad.any(-1).nonzero()[0])
    name, is_weight, tensor = named[k]
    member = int(bad[k].nonzero()[0])
    if not is_weight:
        what = f"{name} is not finite"
    elif bool(nonfinite_members(tensor.detach())[member]):
        what = f"weights {name} are not finite"
    else:
        what = f"weights {name} overflow (their norm is not finite in {str(tensor.dtype).replace('torch.', '')})"
    return Diverged(step, int(seeds[member]), what)


def check_finite(step: int, seeds: Sequence[int], values: Mapping[str, torch.Tensor | None] | None = None,
                 weights: Mapping[str, torch.Tensor | None] | None = None) -> None:
    """Raise :class:`Diverged` at the first non-finite value or weight (see :func:`find_nonfinite`).

    ``values`` and ``weights`` map names to tensors with a leading member axis (S, ...).
    """
    problem = find_nonfinite(step, seeds, values, weights)
    if problem is not None:
        raise problem
