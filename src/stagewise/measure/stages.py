"""Stage detection on logged metric curves, for any run of any lab.

Works on the long-form metrics frame (columns step, seed, metric, value). A stage is
"reached" at the first logged step where a metric crosses a threshold and stays across it
for ``sustain`` consecutive logged points; across seeds this gives a distribution of
crossing steps (mean, std, range) and an ordering of stages.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

_DIRECTIONS = ("above", "below")


def _check(direction: str, sustain: int) -> None:
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction must be 'above' or 'below', got {direction!r}")
    if int(sustain) != sustain or sustain < 1:
        raise ValueError(f"sustain must be an integer >= 1, got {sustain!r}")


def crossing_step(
    steps: np.ndarray, values: np.ndarray, threshold: float, direction: str = "above", sustain: int = 1
) -> float:
    """First step where values >= threshold ("above") or <= threshold ("below") and stays so.

    steps, values: shape (T,), one curve (sorted by step here). The condition must hold at
    that point and the next ``sustain - 1`` logged points, so a single noisy crossing is
    ignored when sustain >= 2; a window that would run past the last logged point does not
    count. NaN values never satisfy the condition. Returns the step as float, NaN if never.
    """
    _check(direction, sustain)
    steps, values = np.asarray(steps, float).ravel(), np.asarray(values, float).ravel()
    if steps.shape != values.shape:
        raise ValueError(f"steps and values must have the same length, got {steps.size} and {values.size}")
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], values[order]  # (T,)
    with np.errstate(invalid="ignore"):
        ok = values >= threshold if direction == "above" else values <= threshold  # (T,) NaN -> False
    if ok.size < sustain:
        return float("nan")
    run = np.concatenate([[0], np.cumsum(ok)])  # (T + 1,) prefix counts
    held = (run[sustain:] - run[:-sustain]) == sustain  # (T - sustain + 1,) window all True
    hits = np.flatnonzero(held)
    return float(steps[hits[0]]) if hits.size else float("nan")


def _seeds_of(frame: pd.DataFrame, seeds: Iterable[int] | None) -> list[int]:
    if seeds is None:
        return sorted(int(s) for s in pd.unique(frame["seed"]))
    return [int(s) for s in seeds]


def _metric_rows(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    missing = {"step", "seed", "metric", "value"} - set(frame.columns)
    if missing:
        raise ValueError(f"metrics frame lacks columns {sorted(missing)}; needs step, seed, metric, value")
    rows = frame[frame["metric"] == metric]
    if rows.empty:
        known = sorted(map(str, pd.unique(frame["metric"])))
        shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
        raise ValueError(f"metric {metric!r} not in the metrics frame; available: {shown}")
    return rows


def crossing_steps(
    frame: pd.DataFrame,
    metric: str,
    threshold: float,
    direction: str = "above",
    sustain: int = 1,
    seeds: Iterable[int] | None = None,
) -> dict[int, float]:
    """{seed: crossing step or NaN} of one metric; see ``crossing_step``.

    ``seeds`` defaults to every seed in the frame (for any metric), so a seed that never
    logged this metric maps to NaN. Raises ValueError if the metric is absent altogether.
    """
    _check(direction, sustain)
    rows = _metric_rows(frame, metric)
    wanted = _seeds_of(frame, seeds)
    by_seed = {int(seed): group for seed, group in rows.groupby("seed")}
    out: dict[int, float] = {}
    for seed in wanted:
        group = by_seed.get(seed)
        if group is None:
            out[seed] = float("nan")
            continue
        out[seed] = crossing_step(group["step"].to_numpy(), group["value"].to_numpy(), threshold, direction, sustain)
    return out


def _nan_to_none(x: float) -> float | None:
    return None if isinstance(x, float) and math.isnan(x) else x


@dataclass(frozen=True)
class StageReport:
    """Crossing steps of named stages across seeds.

    per_seed: {stage: {seed: step}} (NaN where the seed never reaches the stage).
    mean, std, min, max: {stage: float} over the seeds that reach the stage; std is the
        sample std (ddof=1), NaN with fewer than 2 reaching seeds; all NaN when none reach.
    n_reached, n_seeds: {stage: int}.
    order: stage names by median crossing step over all seeds, an unreached seed counting
        as +inf (so a stage reached by at most half the seeds sorts after every stage
        reached by most); ties, including unreached stages, keep the criteria order after
        more-often-reached stages.
    """

    per_seed: dict[str, dict[int, float]]
    mean: dict[str, float]
    std: dict[str, float]
    min: dict[str, float]
    max: dict[str, float]
    n_reached: dict[str, int]
    n_seeds: dict[str, int]
    order: list[str]

    def ordered_in_every_seed(self, first: str, second: str) -> bool:
        """Whether ``first`` precedes ``second`` in every seed.

        True iff at least one seed reaches ``first`` and in every seed that reaches
        ``first``, ``second`` is either never reached or reached at a strictly later step.
        Seeds that never reach ``first`` are ignored (whatever ``second`` does there); a tie
        (both reached at the same logged step) counts as not ordered.
        """
        for stage in (first, second):
            if stage not in self.per_seed:
                raise KeyError(f"unknown stage {stage!r}; stages are {list(self.per_seed)}")
        a, b = self.per_seed[first], self.per_seed[second]
        reached = [seed for seed, step in a.items() if not math.isnan(step)]
        if not reached:
            return False
        return all(math.isnan(b.get(seed, math.nan)) or b[seed] > a[seed] for seed in reached)

    def as_dict(self) -> dict:
        """JSON-ready dict (NaN -> None): {"order": [...], "stages": {stage: {...}}}."""
        stages = {}
        for stage, steps in self.per_seed.items():
            stages[stage] = {
                "per_seed": {seed: _nan_to_none(step) for seed, step in steps.items()},
                "mean": _nan_to_none(self.mean[stage]),
                "std": _nan_to_none(self.std[stage]),
                "min": _nan_to_none(self.min[stage]),
                "max": _nan_to_none(self.max[stage]),
                "n_reached": self.n_reached[stage],
                "n_seeds": self.n_seeds[stage],
            }
        return {"order": list(self.order), "stages": stages}


def detect_stages(
    frame: pd.DataFrame, criteria: Mapping[str, tuple[str, float, str]], sustain: int = 1
) -> StageReport:
    """Crossing step of every stage in every seed, with summary stats and an order.

    criteria: {stage name: (metric, threshold, direction)}, e.g.
    ``{"P learned": ("acc.P_only", 0.99, "above"), "Q learned": ("loss.K2", 0.05, "below")}``.
    Seeds are all seeds in the frame. Bad criteria raise ValueError before any work.
    """
    parsed: dict[str, tuple[str, float, str]] = {}
    for stage, criterion in criteria.items():
        if not isinstance(criterion, (tuple, list)) or len(criterion) != 3:
            raise ValueError(f"criterion for stage {stage!r} must be (metric, threshold, direction), got {criterion!r}")
        metric, threshold, direction = criterion
        _check(direction, sustain)
        _metric_rows(frame, metric)
        parsed[stage] = (str(metric), float(threshold), direction)
    seeds = _seeds_of(frame, None)

    per_seed, mean, std, lo, hi, n_reached, n_seeds, rank = {}, {}, {}, {}, {}, {}, {}, {}
    for stage, (metric, threshold, direction) in parsed.items():
        steps = crossing_steps(frame, metric, threshold, direction, sustain, seeds)
        per_seed[stage] = steps
        arr = np.array(list(steps.values()), float)  # (n_seeds,)
        hit = arr[np.isfinite(arr)]
        n_reached[stage], n_seeds[stage] = int(hit.size), int(arr.size)
        mean[stage] = float(hit.mean()) if hit.size else float("nan")
        std[stage] = float(hit.std(ddof=1)) if hit.size >= 2 else float("nan")
        lo[stage] = float(hit.min()) if hit.size else float("nan")
        hi[stage] = float(hit.max()) if hit.size else float("nan")
        median = float(np.median(np.where(np.isfinite(arr), arr, np.inf))) if arr.size else math.inf
        rank[stage] = (median, -hit.size)
    order = sorted(parsed, key=lambda stage: rank[stage])  # stable: criteria order on ties
    return StageReport(per_seed, mean, std, lo, hi, n_reached, n_seeds, order)


@dataclass(frozen=True)
class Order:
    """When two conditions on logged metrics are first reached (:func:`order_of`), one seed.

    ``first_step`` / ``then_step``: the reach step of each (None: never, within the records);
    ``last_step``: the last logged step of the two metrics; ``lead``: ``then_step - first_step``
    when both are reached, ``last_step + 1 - first_step`` (a lower bound) when only the first is,
    None otherwise."""

    first_step: float | None
    then_step: float | None
    last_step: float

    @property
    def lead(self) -> float | None:
        if self.first_step is None:
            return None
        if self.then_step is None:
            return self.last_step + 1 - self.first_step
        return self.then_step - self.first_step

    @property
    def testable(self) -> bool:
        """Whether any condition is reached (neither: the thresholds are beyond what the model attains)."""
        return self.first_step is not None or self.then_step is not None


def order_of(frame: pd.DataFrame, first: tuple[str, str, float], then: tuple[str, str, float], sustain: int = 1,
             seed: int | None = None) -> Order:
    """When ``first`` and ``then`` — each (metric, ">=" or "<=", threshold) — are reached in the
    long-form metrics ``frame`` (one ``seed``; default: its only one): the first step from which the
    condition holds at ``sustain`` logged points in a row (:func:`crossing_step`); ValueError naming
    a metric the frame lacks."""
    points = []
    last = -math.inf
    for metric, relation, threshold in (first, then):
        rows = _metric_rows(frame, metric)
        if seed is not None:
            rows = rows[rows["seed"] == seed]
        step = crossing_step(rows["step"].to_numpy(), rows["value"].to_numpy(), threshold,
                             "above" if relation == ">=" else "below", sustain)
        points.append(_nan_to_none(step))
        last = max(last, float(rows["step"].max()) if len(rows) else -math.inf)
    return Order(points[0], points[1], last)
