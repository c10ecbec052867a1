"""The closed form of Saxe, McClelland & Ganguli (ICLR 2014) for this lab's runs.

With the decoupled init (:mod:`.model`) each mode i evolves alone. Under gradient flow with
learning rate lr(t) = 1/tau its strength a = u_i^T W2 W1 v_i (a = b^2 for the balanced
factor b of each layer) obeys

    da/dL = 2 a (s - a),   a(0) = a0,   L(t) = integral of lr over [0, t]   (L = t / tau)

whose solution is the sigmoid

    a(L) = s e^{2 s L} / (e^{2 s L} - 1 + s / a0)  =  s / (1 + (s / a0 - 1) e^{-2 s L}),

so mode i reaches half its singular value at L_half = ln(s / a0 - 1) / (2 s): time scale
~ 1/s, larger singular values first. Gradient descent takes L(t) = sum_{k=1..t} lr_k after
t steps, and its exact per-mode map a_{t+1} = a_t (1 + lr_{t+1} (s - a_t))^2 follows the
flow to a relative error O(lr s) in time.
"""

from __future__ import annotations

import numpy as np

from .config import Config
from .train import learning_rate


def accumulated_lr(config: Config, last: int) -> np.ndarray:
    """L(t) = sum_{k=1..t} lr_k for t = 0 .. last, (last + 1,) float64."""
    rates = [learning_rate(config.train, k) for k in range(1, last + 1)]
    return np.concatenate([[0.0], np.cumsum(rates)])


def closed_form(s: np.ndarray, a0: float, acc: np.ndarray) -> np.ndarray:
    """a(L) of every mode, (T, r), for singular values ``s`` (r,) at accumulated rates ``acc`` (T,)."""
    growth = np.exp(-2.0 * np.outer(acc, s))  # (T, r)
    return s / (1.0 + (s / a0 - 1.0) * growth)  # (T, r)


def theory_half_times(config: Config) -> np.ndarray:
    """The step at which each mode reaches s_i / 2 under the closed form, (r,), interpolated
    between steps; NaN when it lies beyond the run's last step."""
    s = np.asarray(config.data.singular_values, dtype=np.float64)
    target = np.log(s / config.model.init_scale - 1.0) / (2.0 * s)  # (r,) L_half
    acc = accumulated_lr(config, config.train.steps)  # (T + 1,) increasing
    steps = np.arange(acc.size, dtype=np.float64)
    return np.where(target <= acc[-1], np.interp(target, acc, steps), np.nan)


def crossing_time(steps: np.ndarray, values: np.ndarray, level: float) -> float:
    """First (interpolated) step where ``values`` (T,) reach ``level``: 0 when they start
    there, NaN when they never do."""
    above = np.flatnonzero(values >= level)
    if above.size == 0:
        return float("nan")
    k = int(above[0])
    if k == 0:
        return float(steps[0])
    fraction = (level - values[k - 1]) / (values[k] - values[k - 1])
    return float(steps[k - 1] + fraction * (steps[k] - steps[k - 1]))
