"""The gate-noise phase map of issue 28 from a finished sweep folder: the table (markdown) and
the figure (PNG + PDF), every point judged by the criteria declared in
src/stagewise/labs/disentangled/phasemap.py before the runs.

    stagewise sweep examples/sweeps/gate_noise_phase_map.yaml --out sweeps/gate-noise-map --max-parallel 1
    python examples/gate_noise_phase_map.py sweeps/gate-noise-map [--out docs/figures/gate_noise_phase_map.png]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import stagewise
from stagewise.errors import UserError
from stagewise.labs.disentangled.phasemap import CRITERIA, DESCRIPTIONS, GRID, draw, judge_point, phase_table, run_points


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
    shown = table.drop(columns=["t2_times"]).assign(relaxation_times=table["t2_times"].round(2))
    print(shown.to_markdown(index=False, floatfmt=".3g"))
    print()
    for c in CRITERIA:
        print(f"- {c}: {DESCRIPTIONS[c]}")
    draw(table, str(args.out))
    print(f"\nfigure: {args.out} (+ .pdf); {len(table)} points of {len(run_points()) * len(GRID['t2_steps'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
