"""The target map of every seed: M = U diag(s) V^T with the config's singular values s (r,)
and Haar-random orthogonal U (d_out, d_out), V (d_in, d_in) drawn from the seed's own
stream, so member i of an ensemble equals a single run with its seed.

Inputs are whitened (E[x x^T] = I), so the population squared loss of a linear map P is
1/2 ||M - P||_F^2 + const and needs no samples: the lab trains on it exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from stagewise.engine import SeedStreams

from .config import Config

STREAMS = SeedStreams({"target": 1, "init": 2})
"""The lab's seed streams: ``target`` draws U and V, ``init`` the weights (:mod:`.model`)."""


def haar_orthogonal(rng: np.random.Generator, n: int) -> np.ndarray:
    """A Haar-random orthogonal (n, n) matrix: QR of a Gaussian matrix, R's diagonal made positive."""
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))  # (n, n): column j times sign(r_jj)


@dataclass(frozen=True)
class Target:
    """The ensemble's target maps (float64).

    Attributes:
        U: (S, d_out, d_out) left singular vectors, columns; the first r are the modes'.
        V: (S, d_in, d_in) right singular vectors, columns.
        s: (r,) singular values, the same for every member.
        M: (S, d_out, d_in) the maps U_r diag(s) V_r^T.
    """

    U: torch.Tensor
    V: torch.Tensor
    s: torch.Tensor
    M: torch.Tensor

    def to(self, device: torch.device | str) -> "Target":
        return Target(*(x.to(device) for x in (self.U, self.V, self.s, self.M)))


def build_target(config: Config, seeds: list[int]) -> Target:
    """The target map of each seed, stacked along the ensemble axis."""
    d_in, d_out, s = config.data.d_in, config.data.d_out, config.data.singular_values
    r = len(s)
    us, vs = [], []
    for seed in seeds:
        rng = STREAMS.numpy(seed, "target")
        us.append(haar_orthogonal(rng, d_out))
        vs.append(haar_orthogonal(rng, d_in))
    U = torch.from_numpy(np.stack(us))  # (S, d_out, d_out)
    V = torch.from_numpy(np.stack(vs))  # (S, d_in, d_in)
    sv = torch.tensor(s, dtype=torch.float64)  # (r,)
    M = (U[:, :, :r] * sv) @ V[:, :, :r].transpose(1, 2)  # (S, d_out, r) @ (S, r, d_in) -> (S, d_out, d_in)
    return Target(U, V, sv, M)
