"""Summary and claims of the disentangled lab, computed from the logged metrics only."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...measure import detect_stages, values_at
from ...report.claims import Claim, Stats, Summary
from ..contract import RunResult, Tables
from . import claimspecs as cs
from .claims import (LOG2, Q_ACC, REFERENCE, REVIEW_FLOOR, STAGED, GateNoiseValues, SeedValues, control_bound, control_of,
                     gate_noise_claims, judged_by, review_claims, spectral_claims, stage_claims, stage_passes, staged_fraction)
from .config import Config
from .annealgain import difference_interval, gain_beyond_control
from .floor_claims import FLOOR_REASON, anneal_gain_claims, gain_fraction, twin, with_floors


def _mean(frame: pd.DataFrame, metric: str, step: int) -> float:
    return _nanmean(values_at(frame, metric, step))  # nan where no seed has a value


def stage_table(config: Config, stages: pd.DataFrame, variant: str = "", control: str | None = None) -> dict[str, Any]:
    """Means over seeds of the test accuracies and branch losses at the end of each stage,
    and the fraction of seeds passing each per-seed stage criterion (paired with the
    shuffled-label control ``control``, by default the variant's own), from the run's
    ``stages`` table."""
    run = SeedValues.of(stages, variant)
    control_values = SeedValues.of(stages, control if control is not None else control_of(variant))
    out: dict[str, Any] = {"seeds": run.seeds}
    for stage in ("stage1", "stage2"):
        for kind in ("p_only", "q_only", "both"):
            out[f"{stage}.acc.{kind}"] = _nanmean(run.get(stage, f"test.acc.{kind}"))
        for k in ("K1", "K2", "K1.p_queries", "K2.q_queries"):
            out[f"{stage}.{k}"] = _nanmean(run.get(stage, f"test.{k}"))
        out[f"per_seed.{stage}.K1.p_queries"] = run.get(stage, "test.K1.p_queries").tolist()
        out[f"per_seed.{stage}.K2.q_queries"] = run.get(stage, "test.K2.q_queries").tolist()
        out[f"per_seed.{stage}.acc.q_only"] = run.get(stage, "test.acc.q_only").tolist()
        out[f"per_seed.{stage}.acc.q_part"] = run.get(stage, Q_ACC).tolist()
        out[f"{stage}.acc.q_part"] = _nanmean(run.get(stage, Q_ACC))
        if not control_values.empty:
            out[f"control.{stage}.acc.q_part.band"] = control_bound(
                control_values, stage, config.thresholds.control_quantile)
            out[f"control.{stage}.K2.q_queries"] = _nanmean(control_values.get(stage, "test.K2.q_queries"))
    if not run.empty:
        passes = stage_passes(config, run, control_values)
        out["pass_fraction"] = {k: float(np.mean(v)) for k, v in passes.items()}
        if control_values.empty:
            out["pass_fraction"]["q_not_learned_stage1"] = None
        out["staged_fraction"] = staged_fraction(config, run, control_values) if not control_values.empty else None
    return out


def _nanmean(values: np.ndarray) -> float:
    values = np.asarray(values, float)
    return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")


def truncation_means(config: Config, frame: pd.DataFrame, prefix: str = "") -> dict[str, float]:
    """Mean over seeds of P-only / Q-only accuracy after keeping the top or bottom d of the
    2d singular directions at the end (``top.p_only`` ...)."""
    end, d = config.train.steps, config.data.d
    return {f"{keep}.{kind}": _mean(frame, f"{prefix}truncate.{keep}.{d}.acc.{kind}", end)
            for keep in ("top", "bottom") for kind in ("p_only", "q_only")}


def stage_detection(config: Config, frame: pd.DataFrame, prefix: str = "") -> dict[str, Any]:
    th = config.thresholds
    report = detect_stages(frame, {"P learned": (f"{prefix}test.acc.p_only", th.p_learned, "above"),
                                   "Q learned": (f"{prefix}test.acc.q_only", th.q_learned, "above")}, sustain=3)
    out = report.as_dict()
    out["p_before_q_in_every_seed"] = report.ordered_in_every_seed("P learned", "Q learned")
    return out


FRACTION_TOL = 1e-12  # seed fractions are k / n: compare with a rounding margin


def ablation_claims(config: Config, tables: dict[str, dict[str, Any]]) -> list[Claim]:
    """What each ablation changes, per seed at the loss level (fractions of seeds passing).
    annealing_needed and noise_needed presuppose a baseline staged per seed: not testable
    when it is not."""
    base = tables["baseline"]
    need = config.thresholds.seed_fraction
    staged = bool(base.get("staged_fraction") is not None and base["staged_fraction"] >= need - FRACTION_TOL)
    unstaged = f"the baseline is not staged per seed (staged in {base.get('staged_fraction')} of the seeds, needs {need:g})"
    frac = lambda v, k: tables[v]["pass_fraction"][k] if v in tables and "pass_fraction" in tables[v] else None  # noqa: E731
    out = []
    if "no-anneal" in tables:
        f = frac("no-anneal", "q_learned_stage2")
        spec = judged_by(cs.ANNEALING_NEEDED, 1 - need + FRACTION_TOL if need < 1 else 0.0)
        evidence = (f"baseline staged in {base.get('staged_fraction')} of seeds; no-anneal Q learned (loss level) in {f} of "
                    f"seeds; mean K2 at the end: baseline {base['stage2.K2.q_queries']:.3f}, no-anneal "
                    f"{tables['no-anneal']['stage2.K2.q_queries']:.3f}")
        out.append(spec.result(_value(f), evidence) if staged else spec.not_testable(unstaged, evidence, values=_value(f)))
    if "no-noise" in tables:
        f = frac("no-noise", "q_learned_stage2")
        flat = frac("no-noise", "q_not_learned_stage1")
        evidence = (f"baseline staged in {base.get('staged_fraction')} of seeds; no-noise: Q not learned at t1 in "
                    f"{flat} of seeds, mean Q-part acc at t1 {tables['no-noise']['stage1.acc.q_part']:.3f}, K2 at the end "
                    f"{tables['no-noise']['stage2.K2.q_queries']:.3f} (Q learned in {f} of seeds)")
        if flat is None:
            out.append(cs.NOISE_NEEDED.not_testable("no shuffled-label control for q_not_learned_stage1", evidence))
        else:
            out.append(cs.NOISE_NEEDED.result(flat, evidence) if staged
                       else cs.NOISE_NEEDED.not_testable(unstaged, evidence, values=flat))
    for name, cause in (("anneal-fixed-noise", "the lower rate alone (noise std held at noise * eta1)"),
                        ("noise-off-t1", "stopping the noise alone (rate held at eta1)")):
        if name in tables:
            f = frac(name, "q_learned_stage2")
            spec = judged_by(cs.Q_LEARNED_WITH, need - FRACTION_TOL if need < 1 else 1.0)
            out.append(spec.result(_value(f), f"Q learned in {f} of seeds; mean K2 at t1 "
                                   f"{tables[name]['stage1.K2.q_queries']:.3f}, at the end {tables[name]['stage2.K2.q_queries']:.3f}; "
                                   f"mean Q-only acc at the end {tables[name]['stage2.acc.q_only']:.3f}",
                                   case=name.replace("-", "_"),
                                   statement=f"{cause} lets Q be learned at the loss level (K2 <= {config.thresholds.q_loss:g} "
                                             f"log 2 at the end) in at least {need:g} of the seeds"))
    return out


def _gate_noise_regime(config: Config) -> bool:
    """Whether the run is in the gate-noise regime (a Q noise radius of at least gate_noise.RADIUS_RANGE[0] ||zeta||)."""
    from .ensemble import members_from_config
    from .floor_limits import regime_reason

    return regime_reason(config, members_from_config(config)[0]) is not None


def _with_gate_noise_claims(config: Config, stages: pd.DataFrame, claims: list[Claim]) -> list[Claim]:
    """The gate-noise story against what the model attains (claims.gate_noise_claims): the six
    floor-relative criteria added, and the absolute loss-level stage claims replaced by the same
    criteria judged against the floors (not testable where the threshold is below one)."""
    th = config.thresholds
    criteria, absolute = gate_noise_claims(GateNoiseValues.of_stages(config, stages), th.seed_fraction, th.p_loss, th.q_loss)
    rejudged = {c.id for c in absolute}
    below = [c.id for c in absolute if c.verdict == "not testable" and (c.reason or "").startswith("the threshold")]
    out = [c for c in claims if c.id not in rejudged] + absolute + criteria
    if below:  # the conjunction of the absolute criteria cannot hold when one of them is below its floor
        out = [c.with_not_testable(f"its criterion {', '.join(below)} is below the attainable floor (see that claim), so "
                                   "the four cannot hold together; the floor-relative criteria gn_* judge the story")
               if c.id == cs.TWO_STAGE_PER_SEED.id else c for c in out]
    return out


def _present(claim: Claim | None) -> list[Claim]:
    return [] if claim is None else [claim]


def _value(fraction: float | None) -> float:
    """A fraction of seeds as a claim's value (NaN, which never passes, where it is unknown)."""
    return math.nan if fraction is None else float(fraction)


def summarize(config: Config, frame: pd.DataFrame, tables: Tables, result: RunResult) -> Summary:
    """The Summary: final values and per-seed values at the last step (of the baseline or
    single variant); details hold the stage tables (means and per-seed pass fractions),
    stage detection, ablation / grid / robustness tables and the d-scaling table."""
    extras = result.extras
    kind = config.experiment.kind
    stages = tables.get("stages")
    stages = stages if stages is not None else pd.DataFrame(columns=["variant", "seed", "stage"])
    floors = tables.get("floors")
    summary: dict[str, Any] = {"experiment": kind, "groups": extras["groups"]}
    if floors is not None and len(floors):
        summary["floors"] = floors_details(floors)
    claims: list[Claim] = []
    if kind in ("two-stage", "spectral"):
        summary["stages"] = stage_table(config, stages)
        summary["stage_detection"] = stage_detection(config, frame)
        claims += with_floors(config, stage_claims(config, stages), stages, floors)
        claims += spectral_claims(config, stages, truncation_means(config, frame))
        claims += review_claims(config, stages)
    elif kind == "ablations":
        variants = ["baseline"] + list(config.experiment.ablations)
        variant_tables = {v: stage_table(config, stages, v, control_of("baseline")) for v in variants}  # one null for all
        summary["ablations"] = variant_tables
        summary["anneal_gain_difference"] = difference_interval(stages, "baseline")
        claims += with_floors(config, stage_claims(config, stages, "baseline"), stages, floors, "baseline")
        if REFERENCE in config.experiment.ablations and _gate_noise_regime(config):
            claims = _with_gate_noise_claims(config, stages, claims)
        claims += anneal_gain_claims(config, stages, "baseline")
        claims += _present(gain_beyond_control(stages, ["baseline"]))
        claims += ablation_claims(config, variant_tables)
    elif kind == "grid":
        from .experiments import grid_variants

        summary["grid"] = {v: stage_table(config, stages, v) for v in grid_variants(config)}
        summary["grid_axes"] = {k: list(v) for k, v in config.experiment.grid.items()}
    elif kind == "robustness":
        from .experiments import robustness_configs

        cells = {name: stage_table(cfg, stages, name) for name, cfg in robustness_configs(config)}
        for name, cfg in robustness_configs(config):
            cells[name]["anneal_gain_fraction"] = gain_fraction(cfg, stages, name)
            cells[name]["control_no_gain_fraction"] = gain_fraction(cfg, stages, name, control=True)
            cells[name]["anneal_gain_difference"] = difference_interval(stages, name)  # real - control, paired by seed
            gated = with_floors(cfg, stage_claims(cfg, stages, name), stages, floors, name)  # + the relative forms
            cells[name]["relative"] = {c.id: {"verdict": c.verdict, "pass_fraction": c.pass_fraction, "reason": c.reason}
                                       for c in gated if c.id in RELATIVE}
            # the cell's loss-level criteria whose threshold lies below its attainable floor (not testable there)
            cells[name]["below_floor"] = {c.id: c.reason for c in gated if c.id in STAGED and c.verdict == "not testable"
                                          and (c.reason or "").startswith(FLOOR_REASON)}
            if not SeedValues.of(stages, twin(name)).empty:
                cells[name]["no_anneal"] = stage_table(cfg, stages, twin(name), control_of(twin(name)))
        summary["robustness"] = cells
        claims += robustness_claims(config, cells)
        claims += _present(gain_beyond_control(stages, list(cells)))  # every cell's seeds, paired within their cell
    elif kind == "d-scaling":
        summary["d_scaling"] = d_table(config, frame, extras)
        claims += bound_claims(summary["d_scaling"])
    final, per_seed = _finals(config, frame, extras["seeds"])
    return Summary(lab="disentangled", seeds=extras["seeds"], final=final, per_seed=per_seed, claims=claims,
                   details=summary)


def robustness_claims(config: Config, cells: dict[str, dict[str, Any]]) -> list[Claim]:
    """Each per-seed criterion over every (d, seed block) cell: its value is the smallest
    fraction of seeds passing over the cells, judged against seed_fraction; not testable
    when a cell has no fraction (no control)."""
    need = config.thresholds.seed_fraction
    spec = judged_by(cs.ROBUST, need - FRACTION_TOL if need < 1 else 1.0)
    out = []
    for key in (*STAGED, "staged", "anneal_gain", "control_no_gain", "q_drop_stage2"):
        if key in ("anneal_gain", "control_no_gain") and all(c.get(f"{key}_fraction") is None for c in cells.values()):
            continue  # no no-anneal twins in this run
        fracs = {name: cell_fraction(c, key) for name, c in cells.items()}
        why = {name: cell_reason(c, key) for name, c in cells.items() if fracs[name] is None and cell_reason(c, key)}
        known = [f for f in fracs.values() if f is not None]
        evidence = "; ".join(f"{n}: {'n/a' if f is None else f'{f:.2f}'}" for n, f in fracs.items())
        statement = f"{key.replace('_', ' ')}: at least {need:g} of the seeds pass in every d x seed block"
        if why and len(why) + len(known) == len(fracs):  # the cells without a value are not testable, with a reason
            first = next(iter(why))
            reason = f"not testable in {len(why)} of {len(fracs)} blocks ({first}: {why[first]})"
            if not known:
                out.append(spec.not_testable(reason, evidence, case=key, statement=statement))
            else:
                out.append(spec.result(min(known), f"{evidence}; judged on the testable blocks, {reason}", case=key,
                                       statement=statement))
        elif not known:
            out.append(spec.not_testable("no block has a pass fraction for this criterion", evidence, case=key,
                                         statement=statement))
        elif len(known) < len(fracs):
            out.append(spec.result(None, f"{evidence} (a block without a value counts as failing)", case=key,
                                   statement=statement))
        else:
            out.append(spec.result(min(known), evidence, case=key, statement=statement))
    return out


RELATIVE = (cs.P_DROP_STAGE1.id, cs.Q_FLAT_DROP_STAGE1.id, cs.Q_DROP_STAGE2.id, cs.P_KEPT_DROP_STAGE2.id)
"""The relative forms :func:`.floor_claims.with_floors` appends (a robustness cell's ``relative``)."""


def cell_reason(cell: dict[str, Any], key: str) -> str | None:
    """Why criterion ``key`` is not testable in a robustness cell (below its floor, or its
    relative form's reason), None where it is testable or simply not measured."""
    if key in cell.get("below_floor", {}):
        return cell["below_floor"][key]
    if key == "staged" and cell.get("below_floor"):
        return f"its criterion {', '.join(cell['below_floor'])} is below the attainable floor, so the four cannot hold together"
    rel = cell.get("relative", {}).get(key)
    return rel["reason"] if rel is not None and rel["verdict"] == "not testable" else None


def cell_fraction(cell: dict[str, Any], key: str) -> float | None:
    """A robustness cell's fraction of seeds passing criterion ``key`` (None: not measured or
    not testable there)."""
    if key in cell.get("below_floor", {}) or (key == "staged" and cell.get("below_floor")):
        return None
    if key == "staged":
        return cell.get("staged_fraction")
    if key in ("anneal_gain", "control_no_gain"):
        return cell.get(f"{key}_fraction")
    if key in cell.get("relative", {}):
        rel = cell["relative"][key]
        return None if rel["verdict"] == "not testable" else rel["pass_fraction"]
    return cell.get("pass_fraction", {}).get(key)


FLOOR_COLUMNS = {"K1": "K1*", "K2": "K2*", "analytic.K1": "analytic K1*", "analytic.K2": "analytic K2*",
                 "m_P": "m_P*", "m_Q": "m_Q*", "analytic.m_P": "analytic m_P*", "analytic.m_Q": "analytic m_Q*"}


def floors_details(floors: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """``details.floors``: per variant, the means over seeds of the attainable floors (numerical
    and analytic; test K1* on P-bearing, K2* on Q-bearing queries, nats), the per-seed K1*,
    K2* (in seed order, as text: one flat record per variant, a table in the report), the
    solver's worst gradient norm and any reason a floor is missing."""
    out: dict[str, dict[str, Any]] = {}
    for variant, rows in floors.groupby("variant", sort=False):
        entry: dict[str, Any] = {label: _nanmean(rows[col].to_numpy(float)) for col, label in FLOOR_COLUMNS.items() if col in rows}
        for col in ("K1", "K2"):
            if col in rows:
                entry[f"per seed {col}*"] = ", ".join("nan" if v != v else f"{v:.4f}" for v in rows[col].to_numpy(float))
        grads = rows["grad_norm"].to_numpy(float) if "grad_norm" in rows else np.array([])
        if np.isfinite(grads).any():
            entry["max grad_norm"] = float(np.nanmax(grads))
        if "converged" in rows:
            entry["converged"] = f"{int(rows['converged'].fillna(False).astype(bool).sum())}/{len(rows)}"
        reasons = sorted({str(r) for r in rows.get("reason", pd.Series(dtype=object)).dropna() if str(r)})
        if reasons:
            entry["reason"] = "; ".join(reasons)
        out[str(variant) or "(run)"] = entry
    return out


FINAL_METRICS = ("test.acc", "test.acc.p_only", "test.acc.q_only", "test.acc.both", "test.loss", "train.loss",
                 "test.K1", "test.K2", "test.K1.p_queries", "test.K2.q_queries", "W.fro", "V.fro")


def _finals(config: Config, frame: pd.DataFrame, seeds: list[int]) -> tuple[dict[str, Stats], dict[str, dict[str, Any]]]:
    """Stats over seeds and per-seed values of the main metrics at the last step, for every
    variant of the run (names ``{variant}/{metric}``; plain names for a single-variant run)."""
    end = config.train.steps
    variants = sorted(frame["variant"].dropna().unique()) if "variant" in frame else [""]
    final: dict[str, Stats] = {}
    per_seed: dict[str, dict[str, Any]] = {str(s): {} for s in seeds}
    for variant in variants:
        for metric in FINAL_METRICS:
            name = f"{variant}/{metric}" if variant else metric
            vals = values_at(frame, name, end)
            if len(vals) != len(seeds):
                continue
            final[name] = Stats.of(vals)
            for s, v in zip(seeds, vals):
                per_seed[str(s)][name] = float(v)
    return final, per_seed


def d_table(config: Config, frame: pd.DataFrame, extras: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for group in sorted(extras["groups"], key=lambda g: g["d"]):
        d, L = group["d"], group["prompt_len"]
        pre = f"d={d}/"
        row = {"d": d, "L": L, "lambda": group["l2"],
               "bound_shape": math.sqrt(d) * math.log(d) / L + 1 / math.sqrt(math.log(d))}
        for stage, step in (("stage1", config.train.t1), ("stage2", config.train.steps)):
            for metric in ("K1", "K2", "K1.p_queries", "K2.q_queries"):
                row[f"{metric}_{stage}"] = _mean(frame, f"{pre}train.{metric}", step)
        rows.append(row)
    return rows


BOUND_DIMS = (16, 512)  # the d range a pass/fail verdict needs (no extrapolation beyond it)
LONG_PROMPT = 3.0  # "L >> sqrt(d) log d" read as L >= 3 sqrt(d) log d at every d
ZERO_LOSS = cs.BOUND_TENDS_TO_ZERO.threshold  # 0.05: "tends to 0": K1 at the largest d at most this
MONOTONE_TOL = cs.BOUND_MONOTONE.threshold  # 0.01: K1 may rise by at most this between consecutive d


def bound_claims(rows: list[dict[str, Any]]) -> list[Claim]:
    """Does the P loss (end of stage 1) tend to 0 as d grows, as Theorem 2 claims?

    Tested on K1 over the prompts whose query carries P (a Q-only query's P part is 0, so
    its loss is log 2 whatever d is), as two claims: ``bound_tends_to_zero`` (K1 at the
    largest d <= ZERO_LOSS) and ``bound_monotone`` (K1 never rises by more than
    MONOTONE_TOL between consecutive d). A verdict only where it can be read off the data:
    d spans BOUND_DIMS and L >= LONG_PROMPT sqrt(d) log d holds at every d; otherwise both
    are not testable (a report) with the numbers, including a linear fit against
    1/sqrt(log d) for reading only.
    """
    ds = np.array([r["d"] for r in rows], float)
    k1 = np.array([r["K1.p_queries_stage1"] for r in rows], float)
    table = ", ".join(f"d={int(r['d'])} (L={r['L']}, needs >= {LONG_PROMPT * math.sqrt(r['d']) * math.log(r['d']):.0f}): "
                      f"{r['K1.p_queries_stage1']:.3f}" for r in rows)
    floors = f"reviewer's floor log(1 + e^-1) = {REVIEW_FLOOR:.3f}; log 2 = {LOG2:.3f}"
    if len(ds) >= 2:
        slope, limit = np.polyfit(1 / np.sqrt(np.log(ds)), k1, 1)
        fit = f"; a linear fit against 1/sqrt(log d) would extrapolate to {limit:.3f} (not a test)"
    else:
        fit = ""
    evidence = f"K1 by d: {table}{fit}; {floors}"
    long_enough = all(r["L"] >= LONG_PROMPT * math.sqrt(r["d"]) * math.log(r["d"]) for r in rows)
    last = float(k1[-1]) if len(k1) else math.nan
    rise = float(np.max(np.diff(k1))) if len(k1) >= 2 else math.nan
    if not len(ds) or ds.min() > BOUND_DIMS[0] or ds.max() < BOUND_DIMS[1] or not long_enough:
        why = (f"report only: needs d from {BOUND_DIMS[0]} to {BOUND_DIMS[1]} and L >= {LONG_PROMPT:g} sqrt(d) log d at every d"
               f" (here d = {[int(d) for d in ds]}, long enough: {long_enough})")
        return [cs.BOUND_TENDS_TO_ZERO.not_testable(why, evidence, values=None if math.isnan(last) else last),
                cs.BOUND_MONOTONE.not_testable(why, evidence, values=None if math.isnan(rise) else rise)]
    return [cs.BOUND_TENDS_TO_ZERO.result(last, evidence), cs.BOUND_MONOTONE.result(rise, evidence)]
