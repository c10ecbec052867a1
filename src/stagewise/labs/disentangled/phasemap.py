"""The gate-noise phase map (issue 28; docs/disentangled.md 5a.4): where the paper's whole
two-stage story holds at the loss level, over the levers of the regime, declared here before
any run.

**Grid** (:data:`GRID`): kappa_Q^2 / lambda (rho), the annealing ratio lr_stage2 / lr_stage1, the
stage-2 noise scale (``train.noise_stage2``) and the stage-2 length in steps, at the cheaper size
(preset ``gate-noise-small``: d 100, L 1100, N 200, test 200, 4 seeds). Each (rho, ratio, noise
scale) is one run, sized by :func:`.gate_noise.size` (lambda, the noise c and t1 from rho) and
lasting the longest stage-2 length, with its no-anneal twin and both shuffled controls; each
shorter stage-2 length is read from the same run at its own end step t1 + T2: nothing in a step
depends on the run's total length, so a shorter run is a prefix of the longer one (tested).
The lengths are in steps, not relaxation times 1 / (lr_stage2 lambda), so that every run costs
the same: at the lower rate the same steps are fewer relaxation times (reported per point).

**Criteria** (issue 38: the claims :data:`.claimspecs.GATE_NOISE_CRITERIA`, judged by
:func:`.claims.gate_noise_claims` through the verdict engine; per seed, on the test queries), in the
order of the story, each a share of an attainable drop from log 2 (the lab's relative fractions:
learned >= 0.5, not learned <= 0.2):

==========================  ====================================================================
``gn_p_learned_t1``         (log 2 - K1(t1)) / (log 2 - K1*_t1) >= 0.5; K1*_t1 the theory's P floor
                            with Q unlearned (:func:`.theory.p_floor_t1`)
``gn_q_not_learned_t1``     (log 2 - K2(t1)) / (log 2 - K2_ref) <= 0.2 (one-sided)
``gn_q_learned_end``        (log 2 - K2(end)) / (log 2 - K2_ref) >= 0.5
``gn_p_kept_end``           (log 2 - K1(end)) / (log 2 - K1_ref) >= 0.5
``gn_no_anneal_not_learned``  the no-anneal twin's Q share at the end <= 0.2
``gn_control_not_learned``  the shuffled control's Q share at the end <= 0.2
==========================  ====================================================================

K_ref: the noise-free reference (the no-noise ablation of the same seed) at the same end step, an
empirical attainable bound. A criterion holds at a point when the engine says so with
``thresholds.seed_fraction`` of the seeds (1: every seed); the point is in the region when all six
hold; otherwise its **reason** is the first criterion in this order that does not (with its word:
fails, inconclusive, not testable). The issue-28 absolute criteria (:data:`OLD_CRITERIA`: K1, K2
against 0.5 log 2, Q within 5 % of log 2 at t1 two-sided) stay computed beside as pass fractions,
and the loss-level ones are also judged against the same floors (not testable where the 0.5 log 2
bar is below the floor).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ...report.claims import Claim
from . import claimspecs as cs
from . import gate_noise
from .claims import NO_ANNEAL, REFERENCE, GateNoiseValues, control_of, gate_noise_claims
from .config import Config

LOG2 = math.log(2)
SIZE: dict[str, int | float] = {"d": 100, "prompt_len": 1100, "zeta": 3.0, "radius": 4.0}
"""The cheaper gate-noise size of the map (preset ``gate-noise-small``)."""
RHO_BETWEEN = (30.0, 34.0)
"""rho between the grid's 26 and 40 (issue 38), run at lr_ratio 0.1 and both stage-2 noise scales only
(the ratio that gave the lower K2(end) at every other lever of the first map; about 6 min a run here)."""
GRID: dict[str, tuple[float, ...]] = {
    "rho": (26.0, 40.0),
    "lr_ratio": (0.1, 0.05),
    "noise_stage2": (1.0, 0.5),
    "t2_steps": (400.0, 800.0),
}
"""The declared levers (fixed before the runs): rho = kappa_Q^2 / lambda (26: the preset; 40 inside
the spec's 26-60: a larger P and Q margin, a larger random Q output), lr_stage2 / lr_stage1 (0.1:
the preset; 0.05: sigma_2 from 0.47 to 0.34 sigma_crit), the stage-2 noise scale (1; 0.5: half
the stage-2 noise at the same rate) and the stage-2 length in relaxation times (4, 8: the preset
ran 9 relaxation times, 1022 steps, with K2 flat from about 5; 800 steps are 6 relaxation times at
rho 26 and ratio 0.1, 3 at ratio 0.05)."""
OLD_CRITERIA = ("p_learned", "q_flat", "q_learned", "p_kept", "no_anneal_fails", "control_fails")
"""Issue 28's absolute criteria (computed beside, as pass fractions)."""
OLD_DESCRIPTIONS = {
    "p_learned": "P learned by t1 (K1 <= 0.5 log 2)", "q_flat": "Q within 5 % of log 2 at t1",
    "q_learned": "Q <= 0.5 log 2 at the end", "p_kept": "P kept (K1 <= 0.5 log 2 at the end)",
    "no_anneal_fails": "the no-anneal twin does not learn Q", "control_fails": "the shuffled control does not learn Q",
}
CRITERIA = tuple(spec.id for spec in cs.GATE_NOISE_CRITERIA)
DESCRIPTIONS = {spec.id: f"{spec.statement}: {spec.quantity} {spec.relation} {spec.threshold:g}" for spec in cs.GATE_NOISE_CRITERIA}
SEEDS = 4
LR_STAGE1 = 1.0


def run_points() -> list[dict[str, Any]]:
    """One run per (rho, lr_ratio, noise_stage2), lasting the longest stage-2 length: its
    levers and the config values that differ from preset ``gate-noise-small``; the points at
    lr_ratio 0.1 first, by rho (the sweep runs them in this order)."""
    out = []
    between = itertools.product(RHO_BETWEEN, (0.1,), GRID["noise_stage2"])
    points = [*itertools.product(GRID["rho"], GRID["lr_ratio"], GRID["noise_stage2"]), *between]
    # run order (issue 38): lr_ratio 0.1 first, by rho, so that a sweep cut short by time keeps the rho lever whole
    points.sort(key=lambda p: (p[1] != 0.1, p[0], -p[2]))
    for rho, ratio, scale in points:
        sized = gate_noise.size(int(SIZE["d"]), int(SIZE["prompt_len"]), SIZE["zeta"], SIZE["radius"], rho, lr_stage1=LR_STAGE1,
                                lr_stage2=LR_STAGE1 * ratio)
        train = sized.overrides()["train"]
        train["steps"] = train["t1"] + int(max(GRID["t2_steps"]))
        out.append({"rho": rho, "lr_ratio": ratio, "noise_stage2": scale,
                    "set": {"train.l2": train["l2"], "train.noise": train["noise"], "train.t1": train["t1"],
                            "train.lr_stage2": train["lr_stage2"], "train.steps": train["steps"],
                            "train.noise_stage2": scale}})
    return out


def relaxation_times(t2_steps: float, lr_stage2: float, l2: float) -> float:
    """Stage-2 steps in L2 relaxation times 1 / (lr_stage2 lambda)."""
    return t2_steps * lr_stage2 * l2


def sweep_yaml() -> str:
    """The sweep file of the map (examples/sweeps/gate_noise_phase_map.yaml): the runs of
    :func:`run_points` as one zip of their config values."""
    points = run_points()
    keys = list(points[0]["set"])
    lines = ["# Issue 28: the gate-noise phase map, declared before the runs (src/stagewise/labs/disentangled/phasemap.py",
             "# writes this file: GRID, CRITERIA; tests/labs/disentangled/test_phasemap.py checks it is current).",
             "# One run per (rho, lr_stage2 / lr_stage1, stage-2 noise scale), sized by gate_noise.size(100, 1100, 3, 4, rho)",
             f"# and lasting t1 + {max(GRID['t2_steps']):g} steps; the stage-2 lengths "
             f"{', '.join(f'{t:g}' for t in GRID['t2_steps'])} steps are read from each run at their end steps.",
             "# Each run: 4 seeds, the no-anneal twin, the noise-free reference (no-noise), both shuffled controls (20 members).",
             f"# Issue 38 added the reference and rho {', '.join(f'{r:g}' for r in RHO_BETWEEN)} (at lr_ratio 0.1, both noise scales).",
             "#   stagewise sweep examples/sweeps/gate_noise_phase_map.yaml --out sweeps/gate-noise-map --max-parallel 1",
             "#   python examples/gate_noise_phase_map.py sweeps/gate-noise-map",
             "# points (rho, lr_ratio, noise_stage2): " + "; ".join(f"({p['rho']:g}, {p['lr_ratio']:g}, {p['noise_stage2']:g})"
                                                                  for p in points),
             "lab: disentangled", "preset: gate-noise-small", "set:", "  experiment.ablations: [no-anneal, no-noise]",
             "  train.checkpoint_every: 500", "axes:"]
    for key in keys:
        lines.append(f"  {key}: [{', '.join(_yaml_num(p['set'][key]) for p in points)}]")
    lines.append(f"zip: [[{', '.join(keys)}]]")
    lines += ["report:", "  metrics: [test.K1.p_queries, test.K2.q_queries, test.acc.q_part]"]
    return "\n".join(lines) + "\n"


def _yaml_num(value: float | int) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


@dataclass(frozen=True)
class PointResult:
    """One point of the map: its levers, the engine's claims on the six criteria (story order),
    the absolute criteria re-judged against the floors, and issue 28's pass fractions beside."""

    levers: dict[str, float]
    end: int  # the logged step the end values are read at (the last at or before t1 + T2)
    claims: list[Claim]  # the six criteria, CRITERIA's order
    absolute: list[Claim]  # p_learned_stage1, q_learned_stage2, p_kept_stage2 against the floors
    old_fractions: dict[str, float]  # OLD_CRITERIA -> fraction of seeds passing (issue 28's rule)
    values: dict[str, list[float]]  # K1_t1, K2_t1, K1_end, K2_end, ref_K1_end, ref_K2_end, no_anneal_K2_end, control_K2_end
    p_floor: float

    @property
    def verdicts(self) -> dict[str, str]:
        return {c.id: str(c.verdict) for c in self.claims}

    @property
    def holds(self) -> dict[str, bool]:
        return {c.id: c.verdict == "holds" for c in self.claims}

    @property
    def fractions(self) -> dict[str, float | None]:
        return {c.id: c.pass_fraction for c in self.claims}

    @property
    def in_region(self) -> bool:
        return all(self.holds[c] for c in CRITERIA)

    @property
    def reason(self) -> str | None:
        """The first criterion (story order) that does not hold, with the engine's word; None in the region."""
        first = next((c for c in self.claims if c.verdict != "holds"), None)
        return None if first is None else f"{first.id} ({first.verdict})"


def _at(metrics: pd.DataFrame, name: str, step: int, seeds: list[int] | None = None) -> np.ndarray:
    """Per-seed values of ``name`` at the logged step nearest to ``step`` (not after it), in the
    order of ``seeds`` (NaN for a seed without it); all NaN when the metric was not logged."""
    rows = metrics[metrics["metric"] == name]
    if not len(rows):
        if seeds is None:
            raise KeyError(f"metric {name!r} not logged")
        return np.full(len(seeds), np.nan)
    steps = np.sort(rows["step"].unique())
    at = steps[steps <= step].max()
    by_seed = rows[rows["step"] == at].set_index("seed")["value"]
    keys = sorted(int(s) for s in by_seed.index) if seeds is None else seeds
    return np.array([float(by_seed.get(s, np.nan)) for s in keys], dtype=float)  # (S,)


def point_config(config: Mapping[str, Any]) -> Config:
    """The lab's Config of a run's resolved config (dict)."""
    return Config.model_validate(dict(config))


def judge_point(metrics: pd.DataFrame, config: Mapping[str, Any], levers: Mapping[str, float], t2_steps: float) -> PointResult:
    """The six criteria at one point: ``metrics`` the run's long metrics (step, seed, variant,
    metric, value; metric names ``VARIANT/test.K2.q_queries``), ``config`` its resolved config
    (dict), ``t2_steps`` the stage-2 length read (the values at the last logged step <= t1 + t2_steps)."""
    from .ensemble import members_from_config
    from .theory import p_floor_t1

    cfg = point_config(config)
    train, th = cfg.train, cfg.thresholds
    t1 = int(train.t1)
    end = t1 + int(t2_steps)
    if end > int(train.steps):
        raise ValueError(f"stage-2 length {t2_steps:g} ends at step {end}, after the run's {train.steps} steps")
    logged = metrics.loc[metrics["metric"] == "baseline/test.K2.q_queries", "step"].to_numpy()
    end = int(logged[logged <= end].max()) if (logged <= end).any() else end  # the step the values are read at
    seeds = sorted(int(s) for s in metrics.loc[metrics["metric"] == "baseline/test.K2.q_queries", "seed"].unique())
    k1 = lambda v, s: _at(metrics, f"{v}/test.K1.p_queries", s, seeds)  # noqa: E731
    k2 = lambda v, s: _at(metrics, f"{v}/test.K2.q_queries", s, seeds)  # noqa: E731
    floor, why = p_floor_t1(cfg, members_from_config(cfg)[0])
    gv = GateNoiseValues(seeds, t1, end, k1("baseline", t1), k2("baseline", t1), k1("baseline", end), k2("baseline", end),
                         k1(REFERENCE, end), k2(REFERENCE, end), k2(NO_ANNEAL, end), k2(control_of("baseline"), end), floor, why)
    claims, absolute = gate_noise_claims(gv, th.seed_fraction, th.p_loss, th.q_loss)
    p_loss, q_loss, q_flat = th.p_loss * LOG2, th.q_loss * LOG2, th.q_flat * LOG2
    with np.errstate(invalid="ignore"):
        passed = {"p_learned": gv.k1_t1 <= p_loss, "q_flat": np.abs(gv.k2_t1 - LOG2) <= q_flat, "q_learned": gv.k2_end <= q_loss,
                  "p_kept": gv.k1_end <= p_loss, "no_anneal_fails": gv.no_anneal_k2_end > q_loss,
                  "control_fails": gv.control_k2_end > q_loss}
    values = {"K1_t1": gv.k1_t1, "K2_t1": gv.k2_t1, "K1_end": gv.k1_end, "K2_end": gv.k2_end, "ref_K1_end": gv.ref_k1_end,
              "ref_K2_end": gv.ref_k2_end, "no_anneal_K2_end": gv.no_anneal_k2_end, "control_K2_end": gv.control_k2_end}
    levers = {**levers, "t2_steps": t2_steps, "t2_times": relaxation_times(t2_steps, float(train.lr_stage2), float(train.l2))}
    return PointResult(levers, end, claims, absolute, {c: float(np.mean(passed[c])) for c in OLD_CRITERIA},
                       {k: v.tolist() for k, v in values.items()}, floor)


def phase_table(results: Sequence[PointResult]) -> pd.DataFrame:
    """One row per point: the levers, each criterion's verdict (the engine's word) and pass
    fraction, the means the criteria read (K1(t1) against its floor, K2(end) against the
    reference's), the absolute criteria's verdicts against the same floors, issue 28's pass
    fractions (``old.*``), in the region, the reason."""
    rows = []
    for r in results:
        row: dict[str, Any] = dict(r.levers)
        row["end_step"] = r.end
        row.update({c: r.verdicts[c] for c in CRITERIA})
        row.update({f"{c}.fraction": r.fractions[c] for c in CRITERIA})
        row["K1_t1_mean"] = float(np.nanmean(r.values["K1_t1"]))
        row["K1_floor_t1"] = r.p_floor
        row["K2_end_mean"] = float(np.nanmean(r.values["K2_end"]))
        row["ref_K2_end_mean"] = float(np.nanmean(r.values["ref_K2_end"])) if np.isfinite(r.values["ref_K2_end"]).any() else np.nan
        row.update({f"abs.{c.id}": str(c.verdict) for c in r.absolute})
        row.update({f"old.{c}": r.old_fractions[c] for c in OLD_CRITERIA})
        row["criteria_held"] = sum(r.holds[c] for c in CRITERIA)
        row["in_region"] = r.in_region
        row["reason"] = r.reason or ""
        rows.append(row)
    return pd.DataFrame(rows)


def draw(table: pd.DataFrame, path: str) -> None:
    """The phase diagram: one panel per (rho, stage-2 length in steps), cells (lr_ratio x noise scale)
    coloured by how many of the six criteria hold, labelled with the first failing one (or
    "all hold") and the mean K2 at the end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rhos, lengths = sorted(table["rho"].unique()), sorted(table["t2_steps"].unique())
    ratios, scales = sorted(table["lr_ratio"].unique(), reverse=True), sorted(table["noise_stage2"].unique(), reverse=True)
    fig, axes = plt.subplots(len(rhos), len(lengths), figsize=(4.2 * len(lengths), 3.4 * len(rhos)), squeeze=False)
    cmap = plt.get_cmap("RdYlGn", len(CRITERIA) + 1)
    for i, rho in enumerate(rhos):
        for j, length in enumerate(lengths):
            ax = axes[i][j]
            grid = np.full((len(ratios), len(scales)), np.nan)
            for a, ratio in enumerate(ratios):
                for b, scale in enumerate(scales):
                    row = table[(table["rho"] == rho) & (table["t2_steps"] == length) & (table["lr_ratio"] == ratio)
                                & (table["noise_stage2"] == scale)]
                    if not len(row):
                        continue
                    r = row.iloc[0]
                    grid[a, b] = r["criteria_held"]
                    label = "all hold" if r["in_region"] else f"first not holding:\n{r['reason']}"
                    ax.text(b, a, f"{label}\nK2(end) {r['K2_end_mean']:.3f}", ha="center", va="center", fontsize=8)
            image = ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(CRITERIA) + 0.5)
            ax.set_xticks(range(len(scales)), [f"{s:g}" for s in scales])
            ax.set_yticks(range(len(ratios)), [f"{r:g}" for r in ratios])
            ax.set_xlabel("stage-2 noise scale")
            ax.set_ylabel("lr_stage2 / lr_stage1")
            ax.set_title(f"rho = {rho:g}, stage 2 = {length:g} steps", fontsize=9)
    fig.suptitle("gate-noise phase map: floor-relative criteria holding (of 6, verdict engine), the first that does not",
                 fontsize=10)
    fig.tight_layout()
    fig.colorbar(image, ax=axes.ravel().tolist(), ticks=range(len(CRITERIA) + 1), label="criteria holding", shrink=0.8)
    fig.savefig(path, dpi=120)
    fig.savefig(str(path).rsplit(".", 1)[0] + ".pdf")
    plt.close(fig)
