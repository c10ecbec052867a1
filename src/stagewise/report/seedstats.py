"""How a claim's per-seed values aggregate over seeds: a paired difference (real - control,
seed by seed) with a percentile bootstrap interval of its mean, and an exact one-sided sign test.

Both are declared with the claim (:data:`AGGREGATIONS`) before any run. With n seeds the
percentile bootstrap of the mean of n values cannot go below the smallest value, and the
sign test's smallest p-value is 2^-n (0.125 for 3 seeds): a 3-seed study can show a
consistent direction, never a significant one at 0.05, and the reports say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .claims import Aggregation, Claim, ClaimSpec

AGGREGATIONS: dict[Aggregation, str] = {
    "paired-bootstrap": "per seed, the paired difference (the claim's value in the run minus the same value in the control "
                        "run of the same seed); the claim holds over seeds when the lower end of the 95% percentile "
                        "bootstrap interval of the mean difference (10,000 resamples of the seeds, generator seed 0) is "
                        "above the claim's threshold",
    "sign-test": "per seed, the claim's value; the exact one-sided sign test of 'value > threshold' over the seeds (ties "
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


def _passes(relation: str, threshold: float, iv: Interval | None) -> bool:
    """An interval passes ``quantity relation threshold`` when all of it does."""
    if iv is None:
        return False
    return iv.low > threshold if relation == ">" else iv.low >= threshold if relation == ">=" else \
        iv.high < threshold if relation == "<" else iv.high <= threshold


def _interval(values: Mapping[Any, float | None]) -> tuple[Interval | None, int]:
    """(bootstrap interval of the finite values or None, how many are not finite)."""
    finite = [float(v) for v in values.values() if v is not None and math.isfinite(v)]
    return (bootstrap_interval(finite) if finite else None), len(values) - len(finite)


def _judge(spec: ClaimSpec, values: Mapping[Any, float | None]) -> tuple[bool, str, float | None]:
    """(passes, the numbers in words, the deciding value) of one condition's per-seed values by
    ``spec.aggregation``: paired-bootstrap: the interval passes the condition as a whole and no
    seed lacks a value (the deciding value: the interval's end nearest the threshold);
    sign-test: the one-sided p of "value passes" <= :data:`SIGN_ALPHA` (the deciding value: p)."""
    if spec.aggregation == "paired-bootstrap":
        iv, missing = _interval(values)
        text = (iv.text() if iv else "no finite value") + (f", {missing} seed(s) without a value" if missing else "")
        deciding = None if iv is None else (iv.low if spec.relation in (">", ">=") else iv.high)
        return _passes(spec.relation, spec.threshold, iv) and not missing, text, deciding
    sign = 1.0 if spec.relation in (">", ">=") else -1.0  # count the values on the passing side
    finite = [sign * float(v) for v in values.values() if v is not None and math.isfinite(v)]
    above, n, p = sign_test(finite, sign * spec.threshold)
    return p <= SIGN_ALPHA, f"{above} of {n} seeds {spec.relation} {spec.threshold:g}, sign test p = {p:.3g}", p


def judge_over_seeds(spec: ClaimSpec, real: Mapping[Any, float | None], controls: Mapping[str, Mapping[Any, float | None]],
                     *, case: str = "over_seeds", label: str = "") -> Claim:
    """The claim over seeds by its declared ``spec.aggregation`` (:func:`_judge`), against its controls.

    ``real``: seed -> the claim's value in each run (None / NaN: the event never happened,
    counted as a failing seed); ``controls``: control name -> seed -> value. The claim holds when
    the real runs pass and every control fails; with paired-bootstrap the paired differences
    real - control (same seed) are reported with their interval."""
    if spec.aggregation is None:
        raise ValueError(f"claim {spec.id}: no declared aggregation")
    fields = spec._declared(case)
    seeds_text = f"{len(real)} seed{'s' if len(real) != 1 else ''}"
    fields["statement"] = f"{spec.statement} — over {seeds_text}{f' ({label})' if label else ''}, against its controls"
    per_seed = {str(k): (float(v) if v is not None and math.isfinite(v) else None) for k, v in real.items()}
    if not real:
        return Claim(**fields, holds=None, verdict="not testable", reason="no run of the real condition")
    ok, text, value = _judge(spec, real)
    parts = [f"real: {text}" + (f": {'passes' if ok else 'does not pass'} {spec.relation} {spec.threshold:g}"
                                if spec.aggregation == "paired-bootstrap" else "")]
    controls_fail = True
    for name, values in controls.items():
        passes, ctext, _ = _judge(spec, values)
        part = f"control {name}: {ctext} -> {'passes too (the claim is not specific)' if passes else 'fails it'}"
        diffs = paired_differences(dict(real), dict(values)) if spec.aggregation == "paired-bootstrap" else {}
        parts.append(part + (f"; real - control per seed {bootstrap_interval(list(diffs.values())).text()}" if diffs else ""))
        controls_fail = controls_fail and not passes
    if not controls:
        parts.append("no control runs among these runs: judged on the real runs alone")
    if len(real) < 5:
        parts.append(f"with {len(real)} seeds the interval is crude and a sign test cannot reach p <= 0.05 "
                     f"(smallest p = {2.0 ** -len(real):.3g})")
    holds = bool(ok and controls_fail)
    fraction = float(spec.passes([math.nan if v is None else v for v in per_seed.values()]).mean())
    return Claim(**fields, holds=holds, verdict="holds" if holds else "fails", evidence="; ".join(parts),
                 value=value, per_seed=per_seed, pass_fraction=fraction)
