"""The gate-noise phase map of issue 28 from a finished sweep folder: the table (markdown) and
the figure (PNG + PDF), every point judged by the criteria declared in
src/stagewise/labs/disentangled/phasemap.py before the runs.

    stagewise sweep examples/sweeps/gate_noise_phase_map.yaml --out sweeps/gate-noise-map --max-parallel 1
    python examples/gate_noise_phase_map.py sweeps/gate-noise-map [--out docs/figures/gate_noise_phase_map.png]
        [--claims results/disentangled/gate_noise_phase_map.json]

--claims writes every point's claims (the engine's verdicts, per-seed values, no metrics) as JSON:
the file `stagewise findings` reads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

import stagewise
from stagewise.orchestrate.findings import PHASE_MAP_KIND
from stagewise.errors import UserError
from stagewise.labs.disentangled.phasemap import (CRITERIA, DESCRIPTIONS, GRID, OLD_CRITERIA, OLD_DESCRIPTIONS, draw, judge_point,
                                                  phase_table, run_points)


def levers_of(config: dict) -> dict[str, float]:
    """The declared levers of the run whose config this is (matched on the sized values)."""
    train = config["train"]
    for point in run_points():
        if all(abs(float(train[k.split(".", 1)[1]]) - float(v)) < 1e-12 for k, v in point["set"].items()):
            return {"rho": point["rho"], "lr_ratio": point["lr_ratio"], "noise_stage2": point["noise_stage2"]}
    raise SystemExit(f"a run of the sweep is not a point of phasemap.GRID (train: {train})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--out", type=Path, default=Path("gate_noise_phase_map.png"))
    parser.add_argument("--claims", type=Path, default=None, help="write every point's claims here (JSON)")
    args = parser.parse_args()
    sweep = stagewise.load_sweep(args.sweep)
    results = []
    for label in sweep.runs:
        try:
            run = sweep.runs[label]
        except UserError:  # not started yet
            run = None
        if run is None or run.summary is None:
            print(f"note: {label} has not finished; left out", file=sys.stderr)
            continue
        levers = levers_of(run.config)
        results += [judge_point(run.metrics, run.config, levers, t2) for t2 in GRID["t2_steps"]]
    if not results:
        raise SystemExit("no finished point")
    table = phase_table(results).sort_values(["rho", "t2_steps", "lr_ratio", "noise_stage2"], ascending=[True, True, False, False])
    short = {"holds": "H", "fails": "F", "inconclusive": "I", "not testable": "NT", "not applicable": "NA"}
    shown = pd.DataFrame({
        "rho": table["rho"], "lr2/lr1": table["lr_ratio"], "noise2": table["noise_stage2"],
        "T2 (relax.)": [f"{t:g} ({r:.1f})" for t, r in zip(table["t2_steps"], table["t2_times"])],
        **{c.removeprefix("gn_"): table[c].map(short) for c in CRITERIA},
        "K1(t1) / K1*": [f"{a:.3f} / {b:.3f}" for a, b in zip(table["K1_t1_mean"], table["K1_floor_t1"])],
        "K2(end) / ref": [f"{a:.3f} / {b:.3f}" for a, b in zip(table["K2_end_mean"], table["ref_K2_end_mean"])],
        **{f"abs {c.removeprefix('abs.').removesuffix('_stage1').removesuffix('_stage2')}": table[c].map(short)
           for c in table.columns if c.startswith("abs.")},
        **{f"old {c}": table[f"old.{c}"] for c in OLD_CRITERIA},
        "first not holding": table["reason"]})
    print(shown.to_markdown(index=False, floatfmt=".3g"))
    print()
    for c in CRITERIA:
        print(f"- {c}: {DESCRIPTIONS[c]}")
    for c in OLD_CRITERIA:
        print(f"- old {c} (issue 28, fraction of seeds): {OLD_DESCRIPTIONS[c]}")
    draw(table, str(args.out))
    print(f"\nfigure: {args.out} (+ .pdf); {len(table)} points of {len(run_points()) * len(GRID['t2_steps'])}")
    if args.claims is not None:
        points = [{"levers": r.levers, "end_step": r.end, "claims": [c.model_dump(mode="json") for c in r.claims],
                   "absolute": [c.model_dump(mode="json") for c in r.absolute], "old_fractions": r.old_fractions}
                  for r in results]
        args.claims.parent.mkdir(parents=True, exist_ok=True)
        record = {"kind": PHASE_MAP_KIND, "lab": "disentangled", "label": "gate-noise phase map (issue 38 criteria)",
                  "command": "stagewise sweep examples/sweeps/gate_noise_phase_map.yaml --out sweeps/gate-noise-map "
                             "--max-parallel 1", "points": points}
        args.claims.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
        print(f"claims: {args.claims}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
