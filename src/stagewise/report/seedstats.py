"""Over-seeds helpers and the over-seeds judgement of a claim on the verdict engine
(:mod:`.verdicts`, which decides every verdict): :func:`judge_over_seeds`.

The percentile bootstrap of the mean (:func:`bootstrap_interval`) stays for descriptive
intervals (the anneal gain's, the spectral claim's per-seed table); it decides no verdict: with
n seeds it cannot go below the smallest value, and at 3 seeds its 95 % interval covers about
75 % of the time (tests/report/test_verdicts.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import verdicts
from .claims import Aggregation, Claim, ClaimSpec

AGGREGATIONS: dict[Aggregation, str] = {
    "median": verdicts.METHODS["median"],
    "paired-median": verdicts.METHODS["paired-median"],
    "paired-bootstrap": "(summaries before the verdict engine; judged now as paired-median) per seed, the paired "
                        "difference (the claim's value in the run minus the same value in the control "
                        "run of the same seed); the claim holds over seeds when the lower end of the 95% percentile "
                        "bootstrap interval of the mean difference (10,000 resamples of the seeds, generator seed 0) is "
                        "above the claim's threshold",
    "sign-test": "(summaries before the verdict engine; judged now as median) per seed, the claim's value; the exact "
                 "one-sided sign test of 'value > threshold' over the seeds (ties "
                 "dropped); holds when p <= 0.05 (needs at least 5 seeds)",
}
"""Aggregation name -> what it computes, as the claims and reports state it."""

LEVEL = 0.95
RESAMPLES = 10_000
BOOT_SEED = 0
SIGN_ALPHA = 0.05


@dataclass(frozen=True)
class Interval:
    """Mean of ``values`` (n of them) with its percentile bootstrap interval [low, high] at ``level``."""

    n: int
    mean: float
    low: float
    high: float
    level: float = LEVEL

    def text(self, digits: int = 3) -> str:
        return f"{self.mean:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}] ({self.level:.0%}, {self.n} seeds)"


def bootstrap_interval(values: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES,
                       seed: int = BOOT_SEED) -> Interval:
    """Percentile bootstrap of the mean: ``resamples`` draws of n values with replacement.

    values: (n,) finite numbers, n >= 1. Vectorised: one (resamples, n) index draw."""
    x = np.asarray(values, dtype=float).reshape(-1)  # (n,)
    if x.size == 0 or not np.isfinite(x).all():
        raise ValueError(f"bootstrap_interval: needs finite values, got {x.tolist()}")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)  # (resamples,)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Interval(int(x.size), float(x.mean()), float(low), float(high), level)


def sign_test(values: Sequence[float], threshold: float = 0.0) -> tuple[int, int, float]:
    """(k above, n non-tied, p): the exact one-sided p-value P(Binomial(n, 1/2) >= k)."""
    x = np.asarray(values, dtype=float).reshape(-1)
    above, below = int((x > threshold).sum()), int((x < threshold).sum())
    n = above + below
    p = sum(math.comb(n, i) for i in range(above, n + 1)) / 2**n if n else 1.0
    return above, n, float(p)


def paired_differences(real: Mapping[int, float | None], control: Mapping[int, float | None]) -> dict[int, float]:
    """{seed: real - control} over the seeds both have with finite values."""
    out: dict[int, float] = {}
    for seed, value in real.items():
        other = control.get(seed)
        if value is not None and other is not None and math.isfinite(value) and math.isfinite(other):
            out[seed] = float(value) - float(other)
    return out


def judge_over_seeds(spec: ClaimSpec, real: Mapping[Any, float | None], controls: Mapping[str, Mapping[Any, float | None]],
                     *, case: str = "over_seeds", label: str = "") -> Claim:
    """The claim over seeds by the verdict engine (:func:`~.verdicts.decide` with
    :meth:`ClaimSpec.seeds_rule`: its declared aggregation, minimum seed count, band and
    tolerance), against its controls.

    ``real``: seed -> the claim's value in each run (None: the event never happened, a failing
    seed unless the claim declares otherwise); ``controls``: control name -> seed -> value.
    ``median``: the real arm's median interval decides and every control must fail;
    ``paired-median``: the interval of the per-seed real - control differences decides, each
    arm's own verdict beside it. Fewer finished seeds than declared: inconclusive (n of k seeds)."""
    if spec.aggregation is None:
        raise ValueError(f"claim {spec.id}: no declared aggregation")
    seeds_text = f"{len(real)} seed{'s' if len(real) != 1 else ''}"
    statement = f"{spec.statement} — over {seeds_text}{f' ({label})' if label else ''}, against its controls"
    # no seed with a value (the real runs could not measure it): the engine's "inconclusive (0 of k seeds)"
    decision = verdicts.decide({str(k): v for k, v in real.items()}, spec.seeds_rule(),
                               {name: {str(k): v for k, v in values.items()} for name, values in controls.items()})
    return spec.judged(decision, case=case, statement=statement)
