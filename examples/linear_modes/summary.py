"""Summary and claims of the linear-modes lab, computed from the logged metrics only.

Per group and seed: the half-time t_i of every mode (:func:`.theory.crossing_time` of
``W2W1.mode_strength.{i}`` at s_i / 2), from which the claims' two quantities follow: the
order ratio min_i t_{i+1} / t_i and the theory error max_i |t_i - t_i*| / t_i* (t_i* the
closed form's half-time). A mode that never reaches half strength, or starts there (t_i = 0),
leaves its seed's values undefined or off: that seed fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stagewise.labs.contract import RunResult, Tables
from stagewise.measure import detect_stages, series, values_at
from stagewise.report.claims import Claim, ClaimSpec, Stats, Summary

from . import claimspecs as cs
from .config import NAME, Config
from .theory import crossing_time, theory_half_times
from .train import groups


def metric(variant: str, i: int) -> str:
    """The record name of mode i's strength in group ``variant``."""
    return f"{variant}/W2W1.mode_strength.{i}" if variant else f"W2W1.mode_strength.{i}"


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class HalfTimes:
    """One group's half-times: ``measured`` (S, r) in the order of ``seeds``, ``theory`` (r,)."""

    seeds: list[int]
    measured: np.ndarray
    theory: np.ndarray

    @classmethod
    def of(cls, config: Config, frame: pd.DataFrame, variant: str) -> "HalfTimes":
        s = config.data.singular_values
        seeds = sorted(int(x) for x in frame["seed"].unique())
        measured = [[crossing_time(*series(frame, metric(variant, i), seed), s[i] / 2) for i in range(len(s))] for seed in seeds]
        return cls(seeds, np.array(measured), theory_half_times(config))  # (S, r), (r,)

    def values(self, spec: ClaimSpec) -> np.ndarray:
        """The claim's per-seed quantity, (S,): the order ratio or the theory error."""
        with np.errstate(divide="ignore", invalid="ignore"):
            if spec.id == cs.ONSET_MATCHES_THEORY.id:
                return (np.abs(self.measured - self.theory) / self.theory).max(axis=1)  # (S, r) -> (S,)
            if self.theory.size < 2:
                return np.full(len(self.seeds), np.nan)
            return (self.measured[:, 1:] / self.measured[:, :-1]).min(axis=1)  # (S, r-1) -> (S,)

    def untestable(self, spec: ClaimSpec) -> str:
        """Why ``spec`` cannot be tested on this group ("" when it can)."""
        if spec.id == cs.MODES_IN_ORDER.id and self.theory.size < 2:
            return "one mode: no order to test"
        late = np.flatnonzero(~np.isfinite(self.theory))
        return f"the run ends before the closed form's half-time of mode {int(late[0])}" if late.size else ""

    def evidence(self) -> str:
        latest = np.round(self.measured.max(axis=0), 1).tolist()  # (r,): NaN where a seed never got there
        return f"half-times (latest over seeds) {latest} steps; closed form {np.round(self.theory, 1).tolist()}"

    def judge(self, spec: ClaimSpec) -> Claim:
        """The claim ``spec`` on this group's seeds (not testable, its values kept, when :meth:`untestable` says so)."""
        reason = self.untestable(spec)
        if reason:
            return spec.not_testable(reason, self.evidence(), values=self.values(spec), seeds=self.seeds)
        return spec.result(self.values(spec), self.evidence(), seeds=self.seeds)


def control_claim(name: str, times: HalfTimes) -> Claim:
    """control_fails for control group ``name``: the fraction of its seeds passing the claim it controls."""
    spec = cs.CONTROLLED[name]
    values, reason, case = times.values(spec), times.untestable(spec), name.replace("-", "_")
    statement = f"the {name} control fails {spec.id} in every seed"
    evidence = f"{spec.quantity}: {np.round(values, 3).tolist()} ({spec.relation} {spec.threshold:g} passes); {times.evidence()}"
    if reason:
        return cs.CONTROL_FAILS.not_testable(reason, evidence, case=case, statement=statement)
    return cs.CONTROL_FAILS.result(float(spec.passes(values).mean()), evidence, case=case, statement=statement)


def summarize(config: Config, frame: pd.DataFrame, tables: Tables, result: RunResult) -> Summary:
    """Final values and claims of the run's own group, control_fails of each control; details:
    half-times and stage reports (:func:`stagewise.measure.detect_stages`) of every group."""
    times = {variant: HalfTimes.of(cfg, frame, variant) for variant, cfg in groups(config)}
    main, last = times[""], int(frame["step"].max())
    final = {m: Stats.of(values_at(frame, m, last)) for m in sorted(frame["metric"].unique()) if "/" not in m}
    losses, ratios, errors = (values_at(frame, "train.loss", last), main.values(cs.MODES_IN_ORDER),
                              main.values(cs.ONSET_MATCHES_THEORY))  # (S,) each
    per_seed = {str(seed): {"train.loss": _num(losses[k]), "order_ratio": _num(ratios[k]), "theory_error": _num(errors[k]),
                            **{f"half_time.{i}": _num(t) for i, t in enumerate(main.measured[k])}}
                for k, seed in enumerate(main.seeds)}
    claims = [main.judge(cs.MODES_IN_ORDER), main.judge(cs.ONSET_MATCHES_THEORY)]
    claims += [control_claim(name, times[name]) for name in config.controls]
    half_times, stages = {}, {}
    for variant, cfg in groups(config):
        s, key = cfg.data.singular_values, variant or "main"
        half_times[key] = {"closed_form": [_num(t) for t in times[variant].theory],
                           "per_seed": {str(seed): [_num(t) for t in row] for seed, row in zip(main.seeds, times[variant].measured)}}
        stages[key] = detect_stages(frame, {f"mode {i}": (metric(variant, i), s[i] / 2, "above") for i in range(len(s))}).as_dict()
    details = {"groups": result.extras.get("groups", [""]), "half_times": half_times, "stages": stages}
    return Summary(lab=NAME, seeds=main.seeds, final=final, per_seed=per_seed, claims=claims, details=details)
